package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/exactonce/exactonce/client"
)

// TestTakeRetriedPastItsOwnAttempt: a take whose first attempt failed
// (503, the attempt may still run on the server) is retried under the same
// key; the server answers 409 in_progress while that attempt runs, and the
// client retries again until the answer comes. A first answer of
// in_progress (another caller's attempt, or a key held on /keys) is the
// caller's to handle: returned at once.
func TestTakeRetriedPastItsOwnAttempt(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	keys := map[string]bool{}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys[r.Header.Get("Idempotency-Key")] = true
		w.Header().Set("Content-Type", "application/json")
		switch n.Add(1) {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"unavailable"}`))
		case 2, 3:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"in_progress"}`))
		default:
			_, _ = w.Write([]byte(`{"actionId":"lic","useId":"dev","state":"active"}`))
		}
	}))
	defer api.Close()
	c := client.New(api.URL, fastRetry())
	a, err := c.TakeUse(context.Background(), "lic", "dev", "")
	if err != nil || a.UseID != "dev" || n.Load() != 4 || len(keys) != 1 {
		t.Fatalf("take: %+v %v after %d requests, %d keys", a, err, n.Load(), len(keys))
	}

	n.Store(1) // the next answer is in_progress, to a first attempt
	if _, err := c.TakeUse(context.Background(), "lic", "dev", ""); !errors.Is(err, client.ErrInProgress) || n.Load() != 2 {
		t.Fatalf("in_progress to a first attempt: %v after %d requests", err, n.Load()-1)
	}
}
