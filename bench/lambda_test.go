package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/lambdaruntime"
)

// TestMain: make bench's figures (EXACTONCE_BENCH_N of 1,000 or more) are
// measured on a DynamoDB Local with the JVM's default compilers
// (testkit.SteadyState); make test's smaller run, which checks limits, on
// one compiling with C1 alone: 58 CPU-seconds down to 48.
func TestMain(m *testing.M) {
	n, _ := strconv.Atoi(os.Getenv("EXACTONCE_BENCH_N"))
	testkit.SteadyState = n >= 1000
	testkit.Main(m)
}

// variant is one way of building the functions.
type variant struct {
	name string
	tags []string
}

var variants = []variant{{"untraced", nil}, {"xray", []string{"xray"}}}

// trace is the header Lambda active tracing hands each invocation.
const trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"

// lambdaEnv is a Lambda-like environment for the functions: the table on
// DynamoDB Local, the secret in a fake Secrets Manager (so init includes
// the GetSecretValue a real cold start makes) and an X-Ray daemon that
// drops what it receives.
type lambdaEnv struct {
	dir  string
	vars []string
	bins sync.Map // variant/name → path
}

var (
	envOnce sync.Once
	env     *lambdaEnv
	envErr  error
)

func setup(tb testing.TB) *lambdaEnv {
	testkit.DynamoDB(tb) // skips under -short, before the Once
	envOnce.Do(func() {
		dir, err := os.MkdirTemp("", "exactonce-bench")
		if err != nil {
			envErr = err
			return
		}
		vars, err := testkit.LambdaEnv(tb, "bench-lambda")
		if err != nil {
			envErr = err
			return
		}
		sm := testkit.FakeSecretsManager("bench-secret-0123456789abcdef0123456789", nil) // lives as long as the test binary
		daemon, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			envErr = err
			return
		}
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, _, err := daemon.ReadFrom(buf); err != nil {
					return
				}
			}
		}()
		env = &lambdaEnv{dir: dir, vars: append(vars,
			"EXACTONCE_SECRET_ARN="+testkit.SecretARN, "AWS_ENDPOINT_URL_SECRETS_MANAGER="+sm.URL,
			"AWS_XRAY_DAEMON_ADDRESS="+daemon.LocalAddr().String(),
		)}
	})
	if envErr != nil {
		tb.Fatal(envErr)
	}
	return env
}

// binary builds functions/<name> in variant v once per test binary.
func (e *lambdaEnv) binary(tb testing.TB, v variant, name string) string {
	key := v.name + "/" + name
	if p, ok := e.bins.Load(key); ok {
		return p.(string)
	}
	p := filepath.Join(e.dir, v.name+"-"+name)
	if err := lambdaruntime.Build("..", "./functions/"+name, p, v.tags...); err != nil {
		tb.Fatal(err)
	}
	e.bins.Store(key, p)
	return p
}

func (e *lambdaEnv) start(tb testing.TB, v variant, name string) *lambdaruntime.Function {
	f, err := lambdaruntime.Start(e.binary(tb, v, name), e.vars...)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := f.Ready(ctx); err != nil {
		f.Close()
		tb.Fatal(err)
	}
	return f
}

// invoke sends one API Gateway request and returns the HTTP status.
func invoke(tb testing.TB, f *lambdaruntime.Function, id, body, traceHeader string) int {
	ev, _ := json.Marshal(events.APIGatewayV2HTTPRequest{PathParameters: map[string]string{"actionId": id}, Body: body})
	r, err := f.Invoke(context.Background(), ev, traceHeader)
	if err != nil || r.Error {
		tb.Fatalf("invoke: %v %s", err, r.Body)
	}
	var res events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(r.Body, &res); err != nil {
		tb.Fatal(err)
	}
	return res.StatusCode
}

// BenchmarkColdStart measures a consume function's init: from process start
// to its first poll for work (Lambda's Init Duration, minus the sandbox),
// including config, SDK clients and the secret fetch.
func BenchmarkColdStart(b *testing.B) {
	e := setup(b)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			bin := e.binary(b, v, "consume")
			st, err := os.Stat(bin)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f := e.start(b, v, "consume")
				b.StopTimer()
				f.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(st.Size()), "binary-bytes")
		})
	}
}

// BenchmarkWarmConsume measures one consume invocation through the Runtime
// API (event in, response out, one UpdateItem on DynamoDB Local), traced
// (a sampled trace header, subsegments sent to the daemon) or not.
func BenchmarkWarmConsume(b *testing.B) {
	e := setup(b)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			create, consume := e.start(b, v, "create"), e.start(b, v, "consume")
			defer create.Close()
			defer consume.Close()
			header := ""
			if len(v.tags) > 0 {
				header = trace
			}
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = fmt.Sprintf("warm-%s-%d-%s", v.name, i, strconv.FormatInt(time.Now().UnixNano(), 36))
				if s := invoke(b, create, "", `{"actionId":"`+ids[i]+`","userId":"u"}`, header); s != 201 {
					b.Fatalf("create: %d", s)
				}
			}
			b.ResetTimer()
			for _, id := range ids {
				if s := invoke(b, consume, id, "", header); s != 200 {
					b.Fatalf("consume: %d", s)
				}
			}
		})
	}
}

// TestHarness keeps the benchmarks honest: both builds start, and traced
// and untraced consume answer the same.
func TestHarness(t *testing.T) {
	t.Parallel() // with the bench's other correctness tests (make test: under -race)
	e := setup(t)
	for _, v := range variants {
		create, consume := e.start(t, v, "create"), e.start(t, v, "consume")
		id := "harness-" + v.name
		if s := invoke(t, create, "", `{"actionId":"`+id+`","userId":"u"}`, trace); s != 201 {
			t.Fatalf("%s create: %d", v.name, s)
		}
		for _, want := range []int{200, 409} {
			if s := invoke(t, consume, id, "", trace); s != want {
				t.Fatalf("%s consume: %d, want %d", v.name, s, want)
			}
		}
		create.Close()
		consume.Close()
	}
}
