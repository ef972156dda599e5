package lambdaruntime_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/lambdaruntime"
)

func TestMain(m *testing.M) {
	if os.Getenv(deadlineHelper) != "" {
		deadlineBootstrap()
		return
	}
	testkit.Main(m)
}

// TestBootstrapsServeTheContract runs the real create and consume binaries
// (their main, config from the environment, cold start) as Lambda would,
// against DynamoDB Local.
func TestBootstrapsServeTheContract(t *testing.T) {
	env, err := testkit.LambdaEnv(t, "lambdaruntime")
	if err != nil {
		t.Fatal(err)
	}
	// Built first: on a fresh, busy machine the builds alone took over the
	// 3 minutes the functions have to start and answer.
	bins := map[string]string{}
	for _, name := range []string{"create", "consume"} {
		bins[name] = filepath.Join(t.TempDir(), name)
		if err := lambdaruntime.Build("../..", "./functions/"+name, bins[name]); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := func(name string) *lambdaruntime.Function {
		f, err := lambdaruntime.Start(bins[name], env...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		if _, err := f.Ready(ctx); err != nil {
			t.Fatal(err)
		}
		return f
	}
	invoke := func(f *lambdaruntime.Function, id, body string) events.APIGatewayV2HTTPResponse {
		ev, _ := json.Marshal(events.APIGatewayV2HTTPRequest{PathParameters: map[string]string{"actionId": id}, Body: body})
		r, err := f.Invoke(ctx, ev, "")
		if err != nil || r.Error {
			t.Fatalf("invoke: %v %s", err, r.Body)
		}
		var res events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(r.Body, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}

	create, consume := start("create"), start("consume")
	if r := invoke(create, "", `{"actionId":"boot-1","userId":"u-1"}`); r.StatusCode != 201 {
		t.Fatalf("create: %d %s", r.StatusCode, r.Body)
	}
	for i, want := range []int{200, 409} {
		if r := invoke(consume, "boot-1", ""); r.StatusCode != want {
			t.Fatalf("consume #%d: %d %s, want %d", i+1, r.StatusCode, r.Body, want)
		}
	}
	if r := invoke(consume, "missing", ""); r.StatusCode != 404 {
		t.Fatalf("consume of a missing action: %d %s", r.StatusCode, r.Body)
	}
}

// A function without its configuration must fail its init, not serve.
func TestInitFailureIsReported(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "get")
	if err := lambdaruntime.Build("../..", "./functions/get", bin); err != nil {
		t.Fatal(err)
	}
	f, err := lambdaruntime.Start(bin) // no TABLE_NAME
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := f.Ready(ctx); err == nil {
		t.Fatal("a function without TABLE_NAME became ready")
	}
}
