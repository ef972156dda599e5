package testkit

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
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
