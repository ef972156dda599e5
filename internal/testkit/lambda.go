package testkit

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/store"
)

// SecretARN is the ARN the fake Secrets Manager knows.
const SecretARN = "arn:aws:secretsmanager:us-east-1:000000000000:secret:exactonce-AbCdEf"

// FakeSecretsManager answers GetSecretValue (AWS JSON 1.1) for SecretARN
// with secret, counting calls in calls (may be nil); any other request gets
// the ResourceNotFoundException the real service sends. Point the real
// client at it with AWS_ENDPOINT_URL_SECRETS_MANAGER; Close it when done.
func FakeSecretsManager(secret string, calls *atomic.Int32) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls != nil {
			calls.Add(1)
		}
		var in struct{ SecretId string }
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &in)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		if r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" || in.SecretId != SecretARN {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"__type":"ResourceNotFoundException","message":"no such secret"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ARN": SecretARN, "Name": "exactonce", "SecretString": secret, "VersionId": "v1"})
	}))
}

// LambdaEnv creates table on this test binary's DynamoDB Local and returns
// the environment (KEY=value) a function's main needs to serve from it: the
// table, a plain server secret (no Secrets Manager), a region, dummy
// credentials and the DynamoDB endpoint. Later entries appended to it win.
// Under -short it skips t (DynamoDB).
func LambdaEnv(t testing.TB, table string) ([]string, error) {
	t.Helper()
	if err := store.CreateTable(context.Background(), dynamodb.NewFromConfig(awsconfig.Local(DynamoDB(t))), table, true); err != nil {
		return nil, err
	}
	return []string{
		"TABLE_NAME=" + table, "EXACTONCE_SECRET=lambda-env-test-secret-0123456789abcdef", "EXACTONCE_SECRET_ARN=",
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local",
		"AWS_ENDPOINT_URL_DYNAMODB=" + Endpoint,
	}, nil
}
