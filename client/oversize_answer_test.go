package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/client"
)

// TestOversizeAnswerIsRetriedOnlyAs429Or5xx: an answer whose body is over
// MaxResponseBytes (not the service's: a proxy's, or a hostile endpoint's)
// is ErrResponseTooLarge, and whether it is retried is its status's to say,
// as for any answer: a 2xx, 3xx or 4xx other than 429 is not retried (go-client.md:
// "never on another 4xx"; "an answer 3xx is a *client.Error with that
// status, not retried"); a 429 or 5xx is. Before, every oversize answer was
// taken for a network error and sent again up to MaxAttempts times, reading up to
// 10 MiB each time.
func TestOversizeAnswerIsRetriedOnlyAs429Or5xx(t *testing.T) {
	huge := strings.Repeat(" ", client.MaxResponseBytes+1)
	for _, tc := range []struct {
		status, attempts int
	}{
		{http.StatusOK, 1}, {http.StatusFound, 1}, {http.StatusNotFound, 1}, {http.StatusConflict, 1},
		{http.StatusTooManyRequests, 2}, {http.StatusServiceUnavailable, 2},
	} {
		var attempts atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			attempts.Add(1)
			if tc.status >= 300 && tc.status < 400 {
				w.Header().Set("Location", "http://elsewhere.example/")
			}
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(huge))
		}))
		retry := client.WithRetry(client.Retry{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond})
		// 5 minutes to read each 10 MiB: the default 30 s ran out under
		// -race on a loaded machine (the test is of the limit, not the clock).
		slow := client.WithHTTPClient(&http.Client{Timeout: 5 * time.Minute})
		_, err := client.New(srv.URL, retry, slow).Consume(context.Background(), "a", client.ConsumeInput{})
		srv.Close()
		if !errors.Is(err, client.ErrResponseTooLarge) || int(attempts.Load()) != tc.attempts {
			t.Errorf("%d with a body over 10 MiB: %v after %d attempts; want ErrResponseTooLarge after %d", tc.status, err, attempts.Load(), tc.attempts)
		}
	}
}
