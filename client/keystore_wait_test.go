package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/client"
	"github.com/exactonce/exactonce/idempotency"
)

// heldKeyServer is a hosted keys server whose clock is skew from the
// client's: another caller holds the key for about a second more (server
// time), so a claim is answered 409 in_progress with Retry-After (whole
// seconds, at least 1, as the service does; none if retryAfter is false)
// and leaseExpiresAt in the server's clock; after the lease, the key is
// completed. The lease starts at the first claim, however late a loaded
// machine sends it.
func heldKeyServer(t *testing.T, skew time.Duration, retryAfter bool, claims *atomic.Int32) *httptest.Server {
	var end atomic.Int64 // unix ns
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		now := time.Now()
		if claims.Add(1) == 1 {
			end.Store(now.Add(time.Second).UnixNano())
		}
		leaseEnd := time.Unix(0, end.Load())
		w.Header().Set("Content-Type", "application/json")
		if now.Before(leaseEnd) {
			if retryAfter {
				w.Header().Set("Retry-After", fmt.Sprint(max(int(leaseEnd.Sub(now).Seconds()+0.999), 1)))
			}
			w.WriteHeader(http.StatusConflict)
			_, _ = fmt.Fprintf(w, `{"error":"in_progress","message":"held","leaseExpiresAt":%q}`, leaseEnd.Add(skew).UTC().Format(time.RFC3339Nano))
			return
		}
		at := now.Add(skew).UTC().Format(time.RFC3339Nano)
		_, _ = fmt.Fprintf(w, `{"key":"k","state":"completed","response":{"ok":true},"attempts":1,"failures":0,"createdAt":%q,"completedAt":%q}`, at, at)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestDoWaitsForRetryAfterWhateverTheClocks: Do on a key another caller
// holds waits for the server's Retry-After, not for the answer's
// leaseExpiresAt read on the local clock: with the client's clock 5 min
// behind or ahead of the server's, it claims twice (once held, once
// completed) and returns the stored response, rather than claiming in a
// tight loop (a billed write each) or waiting past its context.
func TestDoWaitsForRetryAfterWhateverTheClocks(t *testing.T) {
	for _, skew := range []time.Duration{0, 5 * time.Minute, -5 * time.Minute} {
		t.Run(fmt.Sprint("server clock ", skew), func(t *testing.T) {
			t.Parallel()
			var claims atomic.Int32
			c := client.New(heldKeyServer(t, skew, true, &claims).URL)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := c.Do(ctx, "k", "fp", time.Minute, func(context.Context) (any, error) {
				t.Error("fn ran on a key another caller holds")
				return nil, nil
			})
			if err != nil || string(res) != `{"ok":true}` || claims.Load() != 2 {
				t.Fatalf("Do = %s, %v after %d claims; want the stored response after 2 claims", res, err, claims.Load())
			}
		})
	}
}

// TestKeyStoreInProgressWaitIsBounded: an in_progress answer without
// Retry-After falls back to the answer's leaseExpiresAt, bounded to between
// 1 s and the lease the claim asked for, so a skewed clock neither makes the
// wait 0 (a claim loop) nor longer than one lease.
func TestKeyStoreInProgressWaitIsBounded(t *testing.T) {
	for _, tc := range []struct {
		skew     time.Duration
		min, max time.Duration
	}{
		{0, 500 * time.Millisecond, 1100 * time.Millisecond},
		{5 * time.Minute, 10 * time.Second, 10 * time.Second},
		{-5 * time.Minute, time.Second, time.Second},
	} {
		var claims atomic.Int32
		store := client.New(heldKeyServer(t, tc.skew, false, &claims).URL).KeyStore()
		call := idempotency.Call{Key: "k", Fingerprint: "fp", Lease: 10 * time.Second}
		_, err := idempotency.Run(context.Background(), store, call, func(context.Context) ([]byte, error) {
			t.Error("fn ran on a key another caller holds")
			return nil, nil
		})
		var busy *idempotency.InProgressError
		if !errors.As(err, &busy) || busy.RetryAfter < tc.min || busy.RetryAfter > tc.max {
			t.Errorf("server clock %v, no Retry-After: %v; want to wait between %v and %v", tc.skew, err, tc.min, tc.max)
		}
	}
}
