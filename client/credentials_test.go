package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/exactonce/exactonce/client"
)

// TestNoCredentialsIsNoRequest: a SigV4 client whose credentials cannot be
// had sends nothing, so it has no answer to wait for: the call fails at once
// with the credentials' error (as a bearer client without a token does), not
// after every retry as "no answer", whose effect would be unknown.
func TestNoCredentialsIsNoRequest(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	var asked atomic.Int32
	denied := errors.New("no credentials in this shell")
	cfg := aws.Config{Region: "eu-west-1", Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		asked.Add(1)
		return aws.Credentials{}, denied
	})}
	c := client.New(srv.URL, client.WithSigV4(cfg), client.WithRetry(client.Retry{MaxAttempts: 4}))
	_, err := c.Consume(context.Background(), "a-1", client.ConsumeInput{})
	if !errors.Is(err, denied) || strings.Contains(err.Error(), "no answer") {
		t.Fatalf("err %v, want the credentials' error, not 'no answer'", err)
	}
	if hits.Load() != 0 || asked.Load() != 1 {
		t.Fatalf("%d requests sent, credentials asked %d times; want 0 and 1", hits.Load(), asked.Load())
	}
}
