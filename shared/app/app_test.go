package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/exactonce/exactonce/shared/app"
)

const secretARN = "arn:aws:secretsmanager:us-east-1:000000000000:secret:exactonce-AbCdEf"

// fakeSecretsManager answers GetSecretValue (AWS JSON 1.1) for one secret.
func fakeSecretsManager(t *testing.T, secret string, calls *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var in struct{ SecretId string }
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &in)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		if r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" || in.SecretId != secretARN {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"__type":"ResourceNotFoundException","message":"no such secret"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ARN": secretARN, "Name": "exactonce", "SecretString": secret, "VersionId": "v1"})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestColdStartReadsSecretOnce builds the API exactly as a Lambda's main does,
// with the real Secrets Manager client pointed at a local fake.
func TestColdStartReadsSecretOnce(t *testing.T) {
	var calls atomic.Int32
	sm := fakeSecretsManager(t, "a-secret-from-secrets-manager-0123456789", &calls)
	t.Setenv("TABLE_NAME", "actions")
	t.Setenv("EXACTONCE_SECRET_ARN", secretARN)
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

	t.Setenv("EXACTONCE_SECRET_ARN", secretARN+"-other")
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
