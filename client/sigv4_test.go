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

// TestSigV4 checks the signature a request carries by signing the same
// request again with the SDK's signer at the same instant.
func TestSigV4(t *testing.T) {
	creds := credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "")
	var checked atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got := r.Header.Get("Authorization")
		at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
		if err != nil || !strings.HasPrefix(got, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") || !strings.Contains(got, "/eu-west-1/execute-api/aws4_request") {
			http.Error(w, `{"error":"unsigned","message":"`+got+`"}`, 403)
			return
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
		if err := v4.NewSigner().SignHTTP(r.Context(), c, again, payload, "execute-api", "eu-west-1", at); err != nil || again.Header.Get("Authorization") != got {
			http.Error(w, `{"error":"bad_signature","message":"m"}`, 403)
			return
		}
		checked.Store(true)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"actionId":"a","userId":"u","state":"active","activeAt":"2026-01-01T00:00:00Z","expiresAt":"2026-01-02T00:00:00Z","createdAt":"2026-01-01T00:00:00Z","pinProtected":false}`))
	}))
	defer srv.Close()
	c := client.New(srv.URL, client.WithSigV4(aws.Config{Region: "eu-west-1", Credentials: creds}))
	if _, err := c.CreateAction(context.Background(), client.CreateInput{ActionID: "a", UserID: "u"}); err != nil || !checked.Load() {
		t.Fatalf("signed create: %v", err)
	}
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
