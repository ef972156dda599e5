package app_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/app"
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
