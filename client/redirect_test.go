package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/exactonce/exactonce/client"
)

// TestRedirectIsAnErrorNotFollowed: an answer 3xx (from the API, or
// something in front of it) is never followed, with the client's own
// http.Client or one given by WithHTTPClient: the other server gets no
// request (no PIN, Idempotency-Key, bearer token or SigV4 session token),
// and the call fails with a *client.Error of that status, not retried. The
// caller's http.Client is not changed.
func TestRedirectIsAnErrorNotFollowed(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		_, _ = w.Write([]byte(`{"actionId":"a","userId":"u","state":"consumed"}`))
	}))
	defer other.Close()
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		var attempts atomic.Int32
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			attempts.Add(1)
			http.Redirect(w, r, other.URL+"/elsewhere", status)
		}))
		mine := &http.Client{Timeout: 5 * time.Second}
		for name, opts := range map[string][]client.Option{
			"default, bearer": {client.WithBearerToken(func(context.Context) (string, time.Time, error) { return "token", time.Time{}, nil })},
			"default, SigV4": {client.WithSigV4(aws.Config{Region: "eu-west-1",
				Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", "session-token")})},
			"WithHTTPClient": {client.WithHTTPClient(mine)},
		} {
			attempts.Store(0)
			c := client.New(api.URL, append(opts, client.WithRetry(client.Retry{BaseDelay: time.Millisecond}))...)
			a, err := c.Consume(context.Background(), "a", client.ConsumeInput{PIN: "4821"})
			var e *client.Error
			if !errors.As(err, &e) || e.Status != status {
				t.Errorf("%d, %s: Consume returned an action: %v, error %v; want a *client.Error with status %d", status, name, a != nil, err, status)
			}
			if n := attempts.Load(); n != 1 {
				t.Errorf("%d, %s: %d attempts, want 1 (a redirect is not retried)", status, name, n)
			}
		}
		if mine.CheckRedirect != nil {
			t.Errorf("%d: WithHTTPClient changed the caller's http.Client (CheckRedirect set)", status)
		}
		api.Close()
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests, want none", n)
	}
}
