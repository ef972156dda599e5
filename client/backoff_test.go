package client

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestBackoffStaysUnderMaxDelay: the wait before an attempt is at most
// MaxDelay and never negative, whatever the base delay and the attempt:
// BaseDelay·2^attempt past int64 nanoseconds (20 s at the 30th attempt)
// must not overflow into a negative ceiling (crypto/rand panics on it).
func TestBackoffStaysUnderMaxDelay(t *testing.T) {
	for _, tc := range []Retry{
		{BaseDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second},
		{BaseDelay: 20 * time.Second, MaxDelay: time.Millisecond},
		{BaseDelay: 20 * time.Second, MaxDelay: time.Hour},
		{BaseDelay: time.Hour, MaxDelay: 24 * time.Hour},
		{BaseDelay: math.MaxInt64 / 2, MaxDelay: math.MaxInt64 - 1},
		{BaseDelay: math.MaxInt64, MaxDelay: math.MaxInt64},
		{BaseDelay: time.Nanosecond, MaxDelay: math.MaxInt64},
	} {
		c := &Client{retry: tc}
		for _, attempt := range []int{1, 2, 3, 10, 29, 30, 31, 32, 33, 62, 63, 64, 65, 100, 1000, math.MaxInt} {
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%+v, attempt %d: panic: %v", tc, attempt, r)
					}
				}()
				if d := c.backoff(attempt, nil); d < 0 || d > tc.MaxDelay {
					t.Errorf("%+v, attempt %d: wait %v, want within [0, %v]", tc, attempt, d, tc.MaxDelay)
				}
			}()
		}
	}
}

// TestManyRetriesWithLongBaseDelay: a call retried 31 times under a 20 s
// base delay (capped at 1 ms here to run fast) waits its attempts out and
// returns the last answer's error instead of panicking at the 30th.
func TestManyRetriesWithLongBaseDelay(t *testing.T) {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		attempts.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c := New(srv.URL, WithRetry(Retry{MaxAttempts: 31, BaseDelay: 20 * time.Second, MaxDelay: time.Millisecond}))
	_, err := c.GetAction(context.Background(), "a")
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || attempts.Load() != 31 {
		t.Fatalf("%d attempts, %v; want 31 attempts and the 503", attempts.Load(), err)
	}
}

// TestRetryAfterAsDate: Retry-After may be an HTTP-date (RFC 9110); the
// wait runs until then. Before, a date was read as no Retry-After.
func TestRetryAfterAsDate(t *testing.T) {
	h := http.Header{}
	h.Set("Retry-After", time.Now().Add(3*time.Second).UTC().Format(http.TimeFormat))
	if d := retryAfter(h); d < time.Second || d > 3*time.Second {
		t.Fatalf("retryAfter(date in 3 s) = %v", d)
	}
	h.Set("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT")
	if d := retryAfter(h); d != 0 {
		t.Fatalf("retryAfter(date past) = %v", d)
	}
	// Seconds past what a Duration holds wait the longest it holds, not a
	// wrapped negative (which was no wait at all).
	for v, want := range map[string]time.Duration{"2": 2 * time.Second, "0": 0, "-1": 0, "soon": 0, "": 0,
		"9223372037": time.Duration(math.MaxInt64), "99999999999999": time.Duration(math.MaxInt64)} {
		h.Set("Retry-After", v)
		if d := retryAfter(h); d != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, d, want)
		}
	}
}
