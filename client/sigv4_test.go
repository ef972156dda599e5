package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/exactonce/exactonce/client"
)

// signedBy reports whether r carries the signature creds give it for
// execute-api in eu-west-1, by signing the same request again with the
// SDK's signer at the same instant; body is r's.
func signedBy(r *http.Request, body []byte, creds aws.CredentialsProvider) bool {
	got := r.Header.Get("Authorization")
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil || !strings.HasPrefix(got, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") || !strings.Contains(got, "/eu-west-1/execute-api/aws4_request") {
		return false
	}
	again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), strings.NewReader(string(body)))
	_, signed, _ := strings.Cut(got, "SignedHeaders=")
	signed, _, _ = strings.Cut(signed, ",")
	for _, h := range strings.Split(signed, ";") {
		if h != "host" && h != "x-amz-date" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	c, _ := creds.Retrieve(r.Context())
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		payload = sha(body)
	}
	return v4.NewSigner().SignHTTP(r.Context(), c, again, payload, "execute-api", "eu-west-1", at) == nil && again.Header.Get("Authorization") == got
}

var exampleCreds = credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "")

// TestSigV4: a typed call is signed for API Gateway's IAM authorization.
func TestSigV4(t *testing.T) {
	var checked atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !signedBy(r, body, exampleCreds) {
			http.Error(w, `{"error":"bad_signature","message":"m"}`, 403)
			return
		}
		checked.Store(true)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"actionId":"a","userId":"u","state":"active","activeAt":"2026-01-01T00:00:00Z","expiresAt":"2026-01-02T00:00:00Z","createdAt":"2026-01-01T00:00:00Z","pinProtected":false}`))
	}))
	defer srv.Close()
	c := client.New(srv.URL, client.WithSigV4(aws.Config{Region: "eu-west-1", Credentials: exampleCreds}))
	if _, err := c.CreateAction(context.Background(), client.CreateInput{ActionID: "a", UserID: "u"}); err != nil || !checked.Load() {
		t.Fatalf("signed create: %v", err)
	}
}

// TestSendIsOneSignedRequest: Send signs its raw body and headers as a
// typed call is signed, sends them as given, and hands back any answer
// (a 503 here) as it came, without a retry.
func TestSendIsOneSignedRequest(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		body, _ := io.ReadAll(r.Body)
		switch {
		case !signedBy(r, body, exampleCreds):
			http.Error(w, "unsigned", 403)
		case string(body) != "{not json" || r.Header.Get("Idempotency-Key") != "k1" || r.Header.Get("Content-Type") != "text/plain":
			http.Error(w, "sent otherwise: "+string(body), 400)
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":"unavailable"}`, 503)
		}
	}))
	defer srv.Close()
	c := client.New(srv.URL, client.WithSigV4(aws.Config{Region: "eu-west-1", Credentials: exampleCreds}))
	got, err := c.Send(context.Background(), http.MethodPost, "/actions", []byte("{not json"),
		http.Header{"Idempotency-Key": {"k1"}, "Content-Type": {"text/plain"}})
	if err != nil || got.StatusCode != 503 || got.Header.Get("Retry-After") != "1" || !strings.Contains(string(got.Body), "unavailable") || requests.Load() != 1 {
		t.Fatalf("Send = %+v, %v after %d requests; want the 503 as it came, after 1", got, err, requests.Load())
	}
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
