package app_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/app"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/config"
)

// TestColdStartReadsSecretOnce builds the API exactly as a Lambda's main does,
// with the real Secrets Manager client pointed at a local fake.
func TestColdStartReadsSecretOnce(t *testing.T) {
	var calls atomic.Int32
	sm := testkit.FakeSecretsManager("a-secret-from-secrets-manager-0123456789", &calls)
	defer sm.Close()
	t.Setenv("TABLE_NAME", "actions")
	t.Setenv("EXACTONCE_SECRET_ARN", testkit.SecretARN)
	t.Setenv("EXACTONCE_SECRET", "")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "x")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "x")
	t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", sm.URL)
	if _, err := app.FromEnv(context.Background(), app.Needs{Keys: true}); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Fatalf("GetSecretValue calls = %d, want 1", calls.Load())
	}

	t.Setenv("EXACTONCE_SECRET_ARN", testkit.SecretARN+"-other")
	if _, err := app.FromEnv(context.Background(), app.Needs{Keys: true}); err == nil {
		t.Fatal("a missing secret must fail the cold start")
	}
}

func TestColdStartNeedsConfig(t *testing.T) {
	t.Setenv("TABLE_NAME", "")
	if _, err := app.FromEnv(context.Background(), app.Needs{Keys: true}); err == nil {
		t.Fatal("no TABLE_NAME accepted")
	}
	t.Setenv("TABLE_NAME", "t")
	t.Setenv("EXACTONCE_SECRET_ARN", "")
	t.Setenv("EXACTONCE_SECRET", "")
	t.Setenv("AWS_REGION", "us-east-1")
	if _, err := app.FromEnv(context.Background(), app.Needs{Keys: true}); err == nil {
		t.Fatal("no secret accepted by a function that needs keys")
	}
	if _, err := app.FromEnv(context.Background(), app.Needs{}); err != nil {
		t.Fatalf("get/cancel must start without a secret: %v", err)
	}
}

// TestColdStartFetchesAreBounded: a Secrets Manager or SSM that never
// answers fails the cold start within config.InitFetchTimeout with an error
// that says so, instead of holding the init until Lambda's limit (and then
// answering 500s).
func TestColdStartFetchesAreBounded(t *testing.T) {
	stop := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hang.Close()
	defer close(stop)
	for name, cfg := range map[string]config.Config{
		"secret":     {Table: "t", SecretARN: "arn:aws:secretsmanager:us-east-1:000000000000:secret:exactonce-abc123"},
		"tenant map": {Table: "t", Secret: "s", TenantsParameter: "exactonce-tenants"},
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := app.New(context.Background(), cfg, awsconfig.Local(hang.URL), slog.New(slog.DiscardHandler), nil)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), "no answer within "+config.InitFetchTimeout.String()) {
				t.Fatalf("err %v, want one saying there was no answer within %s", err, config.InitFetchTimeout)
			}
			// Twice the bound: a loaded machine took 8.2 s of 8 (helper-39);
			// an unbounded fetch hangs until the test's own timeout.
			if took > 2*config.InitFetchTimeout {
				t.Fatalf("the cold start took %s, want about %s", took, config.InitFetchTimeout)
			}
			t.Logf("failed after %s: %v", took.Round(100*time.Millisecond), err)
		})
	}
}
