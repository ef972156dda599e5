// Package testkit holds what the integration tests share: one DynamoDB Local
// per test binary, a counter of DynamoDB requests at the SDK's HTTP client,
// and a local server wired to both.
package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"

	"github.com/exactonce/exactonce/local/dynamodblocal"
	"github.com/exactonce/exactonce/local/gateway"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/app"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/telemetry"
)

// Endpoint is the DynamoDB Local of this test binary, set by Main; empty
// under -short. A test that reaches it other than through NewEnv or
// LambdaEnv calls DynamoDB first.
var Endpoint string

// SteadyState, set by a TestMain before it calls Main, starts the test
// binary's DynamoDB Local with the JVM's default compilers, for a long
// measured run (make bench's figures); without it, the instance compiles
// with C1 alone, cheaper for a test binary's run (dynamodblocal.Options).
var SteadyState bool

// Main starts DynamoDB Local (or reuses $EXACTONCE_TEST_DYNAMODB_ENDPOINT),
// runs the tests and stops it. Use it as TestMain. Under -short (make unit)
// it starts nothing, and the tests that need DynamoDB Local skip (DynamoDB).
func Main(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	endpoint, stop, err := dynamodblocal.ForTests(dynamodblocal.Options{SteadyState: SteadyState})
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit:", err)
		os.Exit(1)
	}
	Endpoint = endpoint
	code := m.Run()
	stop()
	os.Exit(code)
}

// DynamoDB returns Endpoint, the test binary's DynamoDB Local; under -short
// (make unit: no Java needed) it skips t instead.
func DynamoDB(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs DynamoDB Local (Java)")
	}
	return Endpoint
}

// OwnDynamoDB returns the endpoint of a DynamoDB Local for t alone, stopped
// when t ends, for a load test run in full: DynamoDB Local's cost per
// request grows with what one instance serves at once. shared/httpapi's
// eight load tests in full, four at a time: on the test binary's instance,
// 210 s and 290 CPU-seconds; each on its own, 85 s and 156 (its JVM
// compiling with C1 alone: with the JVM's default compilers, 263). Under the race
// detector (loads at Scale) and with $EXACTONCE_TEST_DYNAMODB_ENDPOINT it
// is the test binary's.
func OwnDynamoDB(t testing.TB) string {
	t.Helper()
	endpoint := DynamoDB(t)
	if RaceDetector {
		return endpoint
	}
	endpoint, stop, err := dynamodblocal.ForTests(dynamodblocal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return endpoint
}

// On points an Env at endpoint (OwnDynamoDB's) instead of the test
// binary's DynamoDB Local.
func On(endpoint string) func(*server.Options) {
	return func(o *server.Options) {
		o.DynamoDBEndpoint = endpoint
		o.AWS.BaseEndpoint = aws.String(endpoint)
	}
}

// Counter counts the DynamoDB requests that cross the SDK's HTTP client, by
// operation (the X-Amz-Target header), retries included.
type Counter struct {
	next    aws.HTTPClient
	mu      sync.Mutex
	ops     map[string]int
	retried map[string]int
}

// NewCounter wraps next.
func NewCounter(next aws.HTTPClient) *Counter {
	return &Counter{next: next, ops: map[string]int{}, retried: map[string]int{}}
}

// Do implements aws.HTTPClient.
func (c *Counter) Do(r *http.Request) (*http.Response, error) {
	op := r.Header.Get("X-Amz-Target")
	if i := strings.IndexByte(op, '.'); i >= 0 {
		op = op[i+1:]
	}
	// The SDK numbers each attempt of an operation (amz-sdk-request:
	// attempt=N; max=M): attempt 2 and after are its retries of one call.
	attempt, _, _ := strings.Cut(r.Header.Get("amz-sdk-request"), ";")
	retry := strings.HasPrefix(attempt, "attempt=") && attempt != "attempt=1"
	c.mu.Lock()
	c.ops[op]++
	if retry {
		c.retried[op]++
	}
	c.mu.Unlock()
	return c.next.Do(r)
}

// Retried returns, by operation, how many of the requests counted since
// the last Take were the SDK's retries of a call (attempt 2 and after).
func (c *Counter) Retried() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.retried)
}

// Take returns the counts since the last Take and resets them.
func (c *Counter) Take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ops
	c.ops, c.retried = map[string]int{}, map[string]int{}
	return out
}

// Env is a local server for one test, with its request counter and log.
type Env struct {
	*server.Server
	URL     string
	Counter *Counter
	// Capacity sums the units DynamoDB reports for the server's requests.
	Capacity *Capacity
	Log      *SyncBuffer
	offset   atomic.Int64
}

// Patience bounds how long a test waits for what must happen eventually
// (an event through the stream, a sweep, a drain after an outage). It is
// generous because the machine may be loaded: a wait that reaches it has
// failed, and a wait that is answered returns at once, so it costs nothing.
// Tests assert guarantees, not speed (make bench measures speed).
const Patience = 2 * time.Minute

// Scale sizes a test's load (takers, rounds, cycles): n, or a twentieth of
// it (at least 1) under the race detector, which makes every request several
// times dearer and needs only a few callers at once to see a race. make test
// runs each test that scales in full once without -race (FULL_SIZE in the
// Makefile), so the counts its guarantee names are checked as stated, and
// under -race on the same code paths, smaller.
func Scale(n int) int {
	if RaceDetector {
		return max(1, n/20)
	}
	return n
}

// WithEvents runs the stream publisher and the local bus in the Env.
func WithEvents(o *server.Options) { o.Events = true; o.EventLog = io.Discard }

// NewEnv starts a local server on its own table (named after the test).
func NewEnv(t testing.TB, opts ...func(*server.Options)) *Env {
	t.Helper()
	cfg := awsconfig.Local(DynamoDB(t))
	counter := NewCounter(cfg.HTTPClient)
	cfg.HTTPClient = counter
	capacity := NewCapacity()
	capacity.Attach(&cfg)
	logs := &SyncBuffer{}
	table := "t-" + strings.NewReplacer("/", "-", " ", "-", "#", "-").Replace(t.Name())
	if len(table) > 200 {
		table = table[:200]
	}
	o := server.Options{
		DynamoDBEndpoint: Endpoint,
		Table:            table,
		Secret:           "test-secret-0123456789abcdefghijklmnopqrstuvwxyz",
		Log:              slog.New(slog.NewJSONHandler(logs, nil)),
		AWS:              &cfg,
		MetricsOut:       logs, // the EMF lines too, so tests see everything printed
	}
	for _, opt := range opts {
		opt(&o)
	}
	srv, err := server.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	env := &Env{Server: srv, Counter: counter, Capacity: capacity, Log: logs}
	srv.API.Now = func() time.Time { return time.Now().Add(time.Duration(env.offset.Load())) }
	hs := httptest.NewServer(srv.Handler)
	t.Cleanup(hs.Close)
	counter.Take() // table setup is not part of any test's count
	capacity.Take()
	env.URL = hs.URL
	return env
}

// Settled waits, up to Patience, until the stream publisher has handled
// every write made before the call (WithEvents): from then on, what the bus
// holds for them is final, so a test can say that nothing more comes.
func (e *Env) Settled(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	if err := e.Stream.CaughtUp(ctx); err != nil {
		t.Fatalf("the stream publisher did not catch up within %s: %v", Patience, err)
	}
}

// Shift moves the server's clock by d from now on (it starts at real time).
func (e *Env) Shift(d time.Duration) { e.offset.Store(int64(d)) }

// SyncBuffer is a bytes.Buffer safe for concurrent writers.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Response is a decoded HTTP response.
type Response struct {
	Status int
	Header http.Header
	Raw    string
	Body   map[string]any
}

// Str returns a top-level string field of the JSON body.
func (r *Response) Str(k string) string { s, _ := r.Body[k].(string); return s }

// Do sends one request with optional headers (name, value pairs) and fails
// the test if it cannot be sent.
func Do(t testing.TB, client *http.Client, method, url, body string, headers ...string) *Response {
	t.Helper()
	r, err := Send(client, method, url, body, headers...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Send is Do for goroutines: it returns the error instead of failing.
func Send(client *http.Client, method, url, body string, headers ...string) (*Response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := &Response{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
	_ = json.Unmarshal(raw, &out.Body)
	return out, nil
}

// NewDeadEnv serves the handlers on a DynamoDB endpoint that closes every
// connection unanswered, to see how they answer a dependency fault. It
// holds its port: one closed would be free for another test's server.
func NewDeadEnv(t testing.TB) *Env {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	dead := "http://" + l.Addr().String()
	logs := &SyncBuffer{}
	cfg := awsconfig.Local(dead)
	cfg.Retryer = func() aws.Retryer { // the SDK's retries, with short waits
		return retry.AddWithMaxBackoffDelay(retry.NewStandard(), 20*time.Millisecond)
	}
	api, err := app.New(context.Background(), config.Config{Table: "t", Secret: "test-secret-0123456789abcdefghijklmnopqrstuvwxyz"},
		cfg, slog.New(slog.NewJSONHandler(logs, nil)), telemetry.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	mux := gateway.New()
	for route, h := range api.Routes() {
		mux.Route(route, gateway.Handler(h))
	}
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &Env{Server: &server.Server{API: api, Handler: mux}, URL: hs.URL, Log: logs}
}
