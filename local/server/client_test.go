package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/client"
	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/server"
)

// The Go client (module client) against the service as `make run` serves
// it: the client's promises that need the real server (typed errors, retries
// after lost answers, Do and KeyStore over the hosted keys, uses) are tested
// here, in the service's module, so the client's own module imports nothing
// of the service.

// transport counts attempts and can interfere with them: before runs ahead
// of the real round trip (a non-nil answer replaces it), after may drop the
// real answer once the server has acted.
type transport struct {
	attempts atomic.Int64
	before   func(*http.Request) *http.Response
	after    func(*http.Request) bool // true: drop the response
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.attempts.Add(1)
	if t.before != nil {
		if resp := t.before(r); resp != nil {
			return resp, nil
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && t.after != nil && t.after(r) {
		resp.Body.Close()
		return nil, errors.New("connection reset after the server acted (injected)")
	}
	return resp, err
}

func newClient(env *testkit.Env, t *transport) *client.Client {
	return client.New(env.URL, client.WithHTTPClient(&http.Client{Transport: t}),
		client.WithRetry(client.Retry{MaxAttempts: 4, BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond}))
}

// firstAttemptOf reports true once per Idempotency-Key: the first attempt
// of every logical call loses its answer.
func firstAttemptOf() func(*http.Request) bool {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(r *http.Request) bool {
		k := r.Header.Get("Idempotency-Key")
		if k == "" {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		first := !seen[k]
		seen[k] = true
		return first
	}
}

// TestTypedErrors: every outcome maps to its sentinel with its context, in
// exactly one attempt (a 4xx is an answer, never retried).
func TestTypedErrors(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	tr := &transport{}
	c := newClient(env, tr)
	ctx := context.Background()
	mustCreate := func(in client.CreateInput) {
		t.Helper()
		if _, err := c.CreateAction(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(client.CreateInput{ActionID: "used", UserID: "u"})
	if _, err := c.Consume(ctx, "used", client.ConsumeInput{}); err != nil {
		t.Fatal(err)
	}
	mustCreate(client.CreateInput{ActionID: "gone", UserID: "u"})
	if _, err := c.Cancel(ctx, "gone", "refund"); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(48 * time.Hour)
	mustCreate(client.CreateInput{ActionID: "later", UserID: "u", ActiveAt: &later})
	soon := time.Now().Add(time.Minute) // the server's clock is moved past it
	mustCreate(client.CreateInput{ActionID: "soon", UserID: "u", ExpiresAt: &soon})
	mustCreate(client.CreateInput{ActionID: "pin", UserID: "u", PIN: "2468", MaxPINAttempts: 2})
	claim, err := c.Claim(ctx, "held", "f", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	type check func(*client.Error) bool
	cases := []struct {
		name string
		call func() error
		want error
		ok   check
	}{
		{"already used", func() error { _, err := c.Consume(ctx, "used", client.ConsumeInput{}); return err }, client.ErrAlreadyUsed,
			func(e *client.Error) bool { return e.Status == 409 && e.ConsumedAt != nil }},
		{"not found", func() error { _, err := c.GetAction(ctx, "nope"); return err }, client.ErrNotFound, nil},
		{"canceled", func() error { _, err := c.Consume(ctx, "gone", client.ConsumeInput{}); return err }, client.ErrCanceled,
			func(e *client.Error) bool { return e.Status == 410 && e.CanceledAt != nil }},
		{"not active", func() error { _, err := c.Consume(ctx, "later", client.ConsumeInput{}); return err }, client.ErrNotActive,
			func(e *client.Error) bool { return e.ActiveAt != nil && e.ActiveAt.Sub(later).Abs() < time.Millisecond }},
		{"PIN required", func() error { _, err := c.Consume(ctx, "pin", client.ConsumeInput{}); return err }, client.ErrPINRequired,
			func(e *client.Error) bool { return e.Status == 403 && e.Field == "pin" && e.AttemptsRemaining == nil }},
		{"invalid PIN", func() error { _, err := c.Consume(ctx, "pin", client.ConsumeInput{PIN: "0000"}); return err }, client.ErrInvalidPIN,
			func(e *client.Error) bool {
				return e.Status == 403 && e.AttemptsRemaining != nil && *e.AttemptsRemaining == 1
			}},
		{"locking PIN", func() error { _, err := c.Consume(ctx, "pin", client.ConsumeInput{PIN: "1111"}); return err }, client.ErrInvalidPIN, nil},
		{"locked", func() error { _, err := c.Consume(ctx, "pin", client.ConsumeInput{PIN: "2468"}); return err }, client.ErrLocked,
			func(e *client.Error) bool { return e.Status == 423 && e.LockedAt != nil }},
		{"exists", func() error {
			_, err := c.CreateAction(ctx, client.CreateInput{ActionID: "used", UserID: "u"})
			return err
		}, client.ErrExists, nil},
		{"invalid request", func() error { _, err := c.CreateAction(ctx, client.CreateInput{UserID: ""}); return err }, client.ErrInvalidRequest,
			func(e *client.Error) bool { return e.Field == "userId" }},
		{"key in progress", func() error { _, err := c.Claim(ctx, "held", "f", 0); return err }, client.ErrInProgress,
			func(e *client.Error) bool { return e.RetryAfter > 0 && e.LeaseExpiresAt != nil }},
		{"fingerprint mismatch", func() error { _, err := c.Claim(ctx, "held", "g", 0); return err }, client.ErrFingerprintMismatch, nil},
		{"lease lost", func() error { _, err := c.Complete(ctx, "held", strings.Repeat("0", 32), 1); return err }, client.ErrLeaseLost, nil},
		{"key not found", func() error { _, err := c.GetKey(ctx, "none"); return err }, client.ErrNotFound, nil},
		{"expired", func() error {
			env.Shift(2 * time.Minute)
			defer env.Shift(0)
			_, err := c.Consume(ctx, "soon", client.ConsumeInput{})
			return err
		}, client.ErrExpired, nil},
	}
	for _, tc := range cases {
		before := tr.attempts.Load()
		err := tc.call()
		var e *client.Error
		if !errors.Is(err, tc.want) || !errors.As(err, &e) || e.RequestID == "" {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			continue
		}
		if tc.ok != nil && !tc.ok(e) {
			t.Errorf("%s: context missing in %+v", tc.name, e)
		}
		if n := tr.attempts.Load() - before; n != 1 {
			t.Errorf("%s: %d attempts; a 4xx must not be retried", tc.name, n)
		}
		for _, other := range []error{client.ErrUnavailable, client.ErrKeyReused} {
			if errors.Is(err, other) {
				t.Errorf("%s also matches %v", tc.name, other)
			}
		}
	}
	if _, err := c.Complete(ctx, "held", claim.Token, map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, "held", claim.Token, "late"); !errors.Is(err, client.ErrKeyCompleted) {
		t.Fatalf("release after complete: %v", err)
	}
}

// TestRetriesAfterLostAnswers: the first attempt of every call reaches the
// server and loses its answer; the retry, with the same Idempotency-Key,
// gets the first outcome. One action, consumed once, payload revealed.
func TestRetriesAfterLostAnswers(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	tr := &transport{after: firstAttemptOf()}
	c := newClient(env, tr)
	ctx := context.Background()

	a, err := c.CreateAction(ctx, client.CreateInput{UserID: "u", PIN: "2468", Payload: map[string]string{"session": "s-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Replayed || a.ActionID == "" {
		t.Fatalf("create: %+v", a)
	}
	got, err := c.Consume(ctx, a.ActionID, client.ConsumeInput{PIN: "2468", Reason: "login"})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "consumed" || !got.Replayed || string(got.Payload) != `{"session":"s-1"}` {
		t.Fatalf("consume: %+v %s", got, got.Payload)
	}
	if tr.attempts.Load() != 4 {
		t.Fatalf("attempts = %d, want 2 per call", tr.attempts.Load())
	}
	// What the server holds: one consumption, by the first attempt.
	read, err := c.GetAction(ctx, a.ActionID)
	if err != nil || read.State != "consumed" || !read.ConsumedAt.Equal(*got.ConsumedAt) {
		t.Fatalf("get: %+v %v", read, err)
	}
	if _, err := c.Consume(ctx, a.ActionID, client.ConsumeInput{PIN: "2468"}); !errors.Is(err, client.ErrAlreadyUsed) {
		t.Fatalf("a new consume call: %v, want already used", err)
	}
}

// TestRetryHonoursRetryAfter: a 503 with Retry-After: 1 is retried after
// a second, and then succeeds; a context deadline stops the retries.
func TestRetryHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	var n atomic.Int64
	tr := &transport{before: func(r *http.Request) *http.Response {
		if n.Add(1) > 1 {
			return nil
		}
		h := http.Header{"Retry-After": {"1"}, "Content-Type": {"application/json"}}
		return &http.Response{StatusCode: 503, Header: h, Request: r,
			Body: io.NopCloser(strings.NewReader(`{"error":"unavailable","message":"m","requestId":"r"}`))}
	}}
	c := newClient(env, tr)
	start := time.Now()
	if _, err := c.CreateAction(context.Background(), client.CreateInput{ActionID: "a", UserID: "u"}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("retried after %v, before Retry-After", d)
	}

	n.Store(-100) // every attempt is 503 now
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Consume(ctx, "a", client.ConsumeInput{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("under a deadline: %v", err)
	}
	c = client.New(env.URL, client.WithHTTPClient(&http.Client{Transport: tr}), client.WithRetry(client.Retry{MaxAttempts: 2}))
	n.Store(-100)
	tr.before = func(r *http.Request) *http.Response {
		return &http.Response{StatusCode: 503, Header: http.Header{}, Request: r,
			Body: io.NopCloser(strings.NewReader(`{"error":"unavailable","message":"m","requestId":"r"}`))}
	}
	if _, err := c.Consume(context.Background(), "a", client.ConsumeInput{}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("out of attempts: %v", err)
	}
}

// TestDo: 20 concurrent callers of one key, the answers of whose first
// attempts are all lost: the side effect runs once and all get its result.
// A failing effect releases the key, so the next call runs it again.
func TestDo(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	c := newClient(env, &transport{after: firstAttemptOf()})
	var runs atomic.Int64
	effect := func(ctx context.Context) (any, error) {
		runs.Add(1)
		time.Sleep(20 * time.Millisecond)
		return map[string]string{"charge": fmt.Sprint("ch_", runs.Load())}, nil
	}
	var wg sync.WaitGroup
	results := make(chan string, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Do(context.Background(), "order-7", "amount=500", 10*time.Second, effect)
			if err != nil {
				t.Error(err)
				return
			}
			results <- string(r)
		}()
	}
	wg.Wait()
	close(results)
	if runs.Load() != 1 {
		t.Fatalf("the effect ran %d times", runs.Load())
	}
	for r := range results {
		if r != `{"charge":"ch_1"}` {
			t.Fatalf("a caller got %s", r)
		}
	}

	boom := errors.New("card declined")
	if _, err := c.Do(context.Background(), "order-8", "f", 0, func(context.Context) (any, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("failing effect: %v", err)
	}
	r, err := c.Do(context.Background(), "order-8", "f", 0, func(context.Context) (any, error) { return "paid", nil })
	if err != nil || string(r) != `"paid"` {
		t.Fatalf("after a release: %s %v", r, err)
	}
	k, err := c.GetKey(context.Background(), "order-8")
	if err != nil || k.State != "completed" || k.Failures != 1 || k.Attempts != 2 {
		t.Fatalf("key: %+v %v", k, err)
	}
}

// TestWithCaller: locally, the client calls as a principal; two tenants'
// clients see only their own actions.
func TestWithCaller(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, func(o *server.Options) { o.Tenants = `{"a":["svc-a"],"b":["svc-b"]}` })
	ctx := context.Background()
	a := client.New(env.URL, client.WithCaller("arn:aws:sts::111122223333:assumed-role/svc-a/s"))
	b := client.New(env.URL, client.WithCaller("arn:aws:sts::111122223333:assumed-role/svc-b/s"))
	if _, err := a.CreateAction(ctx, client.CreateInput{ActionID: "c-1", UserID: "u"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetAction(ctx, "c-1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("b reads a's action: %v", err)
	}
	if _, err := a.Consume(ctx, "c-1", client.ConsumeInput{}); err != nil {
		t.Fatal(err)
	}
	var e *client.Error
	if _, err := client.New(env.URL).GetAction(ctx, "c-1"); !errors.Is(err, client.ErrForbidden) || !errors.As(err, &e) || e.Status != 403 {
		t.Fatalf("no caller, not in the map: %v", err)
	}
}

// TestUserActions: supersede, list and cancel-all through the client.
func TestUserActions(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	c := client.New(env.URL)
	ctx := context.Background()
	for _, id := range []string{"m1", "m2", "m3"} {
		if _, err := c.CreateAction(ctx, client.CreateInput{ActionID: id, UserID: "ann", Kind: "login", Supersede: true}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := c.ListUserActions(ctx, "ann", client.ListOptions{State: "active"})
	if err != nil || len(page.Actions) != 1 || page.Actions[0].ActionID != "m3" {
		t.Fatalf("after three superseding creates: %+v %v", page, err)
	}
	if _, err := c.CreateAction(ctx, client.CreateInput{ActionID: "m4", UserID: "ann", Kind: "coupon"}); err != nil {
		t.Fatal(err)
	}
	res, err := c.CancelUserActions(ctx, "ann", client.CancelAllInput{Reason: "password changed"})
	if err != nil || res.Canceled != 2 || strings.Join(res.ActionIDs, ",") != "m3,m4" {
		t.Fatalf("cancel-all: %+v %v", res, err)
	}
	all, err := c.ListUserActions(ctx, "ann", client.ListOptions{Limit: 2})
	if err != nil || len(all.Actions) != 2 || all.Cursor == "" {
		t.Fatalf("first page: %+v %v", all, err)
	}
	rest, err := c.ListUserActions(ctx, "ann", client.ListOptions{Limit: 2, Cursor: all.Cursor})
	if err != nil || len(rest.Actions) != 2 || rest.Actions[1].ActionID != "m1" {
		t.Fatalf("second page: %+v %v", rest, err)
	}
}
