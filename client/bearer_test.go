package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/exactonce/exactonce/client"
)

// jwtAPI stands in for API Gateway with a JWT authorizer: a request whose
// Authorization header is not "Bearer " and a token it accepts is 401 with
// API Gateway's body; an accepted one gets a 200 action. It records what
// each request carried.
type jwtAPI struct {
	*httptest.Server
	mu       sync.Mutex
	accepted map[string]bool // tokens the authorizer takes
	seen     []seen
}

type seen struct {
	auth, key, path string
	status          int
}

func newJWTAPI(t *testing.T, accepted ...string) *jwtAPI {
	t.Helper()
	a := &jwtAPI{accepted: map[string]bool{}}
	for _, tok := range accepted {
		a.accepted[tok] = true
	}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		status := http.StatusOK
		if !ok || !a.accepted[tok] {
			status = http.StatusUnauthorized
		}
		a.seen = append(a.seen, seen{r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key"), r.URL.Path, status})
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"message":"Unauthorized"}`))
			return
		}
		_, _ = fmt.Fprintf(w, `{"actionId":%q,"state":"active"}`, path.Base(r.URL.Path))
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *jwtAPI) accept(tok string, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.accepted[tok] = ok
}

func (a *jwtAPI) requests() []seen {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]seen(nil), a.seen...)
}

// tokens is a token source that hands out tok-1, tok-2, … each valid for
// the lifetime life(n) gives it, and counts its calls.
type tokens struct {
	calls atomic.Int64
	life  func(n int64) time.Duration // 0: no expiry given
	gate  chan struct{}               // when set, each fetch waits for it
	err   error
}

func (s *tokens) fetch(ctx context.Context) (string, time.Time, error) {
	n := s.calls.Add(1)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return "", time.Time{}, ctx.Err()
		}
	}
	if s.err != nil {
		return "", time.Time{}, s.err
	}
	var exp time.Time
	if s.life != nil && s.life(n) != 0 {
		exp = time.Now().Add(s.life(n))
	}
	return fmt.Sprintf("tok-%d", n), exp, nil
}

func hour(int64) time.Duration { return time.Hour }

func fastRetry() client.Option {
	return client.WithRetry(client.Retry{MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond})
}

// TestBearerTokenIsSentAndReused: every request carries "Authorization:
// Bearer <token>"; a token that is far from its expiry is fetched once for
// many calls, and one with no expiry is kept until the API refuses it.
func TestBearerTokenIsSentAndReused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		life func(int64) time.Duration
	}{
		{"expires in an hour", hour},
		{"no expiry given", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newJWTAPI(t, "tok-1")
			src := &tokens{life: tc.life}
			c := client.New(api.URL, client.WithBearerToken(src.fetch))
			for range 5 {
				if _, err := c.GetAction(context.Background(), "a-1"); err != nil {
					t.Fatal(err)
				}
			}
			if n := src.calls.Load(); n != 1 {
				t.Errorf("the token source was called %d times for 5 calls, want 1", n)
			}
			for _, r := range api.requests() {
				if r.auth != "Bearer tok-1" || r.status != 200 {
					t.Errorf("request %s: Authorization %q, status %d", r.path, r.auth, r.status)
				}
			}
		})
	}
}

// TestBearerTokenRefreshedBeforeExpiry: a token that expires within the
// refresh margin (client.TokenRefreshMargin) is replaced before a request
// is sent, so the API never sees it expire (no 401 on the way).
func TestBearerTokenRefreshedBeforeExpiry(t *testing.T) {
	t.Parallel()
	api := newJWTAPI(t, "tok-1", "tok-2")
	// tok-1 expires after the margin has begun: usable for the first call,
	// but not to be sent again; tok-2 lives an hour.
	src := &tokens{life: func(n int64) time.Duration {
		if n == 1 {
			return client.TokenRefreshMargin + 300*time.Millisecond
		}
		return time.Hour
	}}
	c := client.New(api.URL, client.WithBearerToken(src.fetch))
	ctx := context.Background()
	if _, err := c.GetAction(ctx, "a-1"); err != nil {
		t.Fatal(err)
	}
	// Poll (bounded) until tok-1 is inside its margin, then call again.
	deadline := time.Now().Add(patience)
	for src.calls.Load() < 2 && time.Now().Before(deadline) {
		if _, err := c.GetAction(ctx, "a-1"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	reqs := api.requests()
	last := reqs[len(reqs)-1]
	if src.calls.Load() != 2 || last.auth != "Bearer tok-2" {
		t.Fatalf("after tok-1 entered its refresh margin: %d fetches, last request %q; want 2 and tok-2", src.calls.Load(), last.auth)
	}
	for _, r := range reqs {
		if r.status != 200 {
			t.Errorf("a request was refused (%d, %q): the token should be replaced before it expires", r.status, r.auth)
		}
	}
	t.Logf("%d requests with tok-1, then tok-2", len(reqs)-1)
}

// TestBearer401RefreshesOnceAndRetriesTheSameCall: a token the API refuses
// (revoked, or expired by the issuer's clock) is replaced once and the same
// logical call sent again, with the same Idempotency-Key; a second 401 is
// the answer (ErrUnauthorized), not retried further. No error text carries
// a token.
func TestBearer401RefreshesOnceAndRetriesTheSameCall(t *testing.T) {
	t.Parallel()
	t.Run("the new token is taken", func(t *testing.T) {
		api := newJWTAPI(t, "tok-2") // tok-1 is refused although it has an hour left
		src := &tokens{life: hour}
		c := client.New(api.URL, client.WithBearerToken(src.fetch), fastRetry())
		if _, err := c.CreateAction(context.Background(), client.CreateInput{ActionID: "a-1", UserID: "u"}); err != nil {
			t.Fatal(err)
		}
		reqs := api.requests()
		if len(reqs) != 2 || reqs[0].status != 401 || reqs[1].status != 200 || reqs[1].auth != "Bearer tok-2" {
			t.Fatalf("requests %+v, want a 401 with tok-1 then a 200 with tok-2", reqs)
		}
		if reqs[0].key == "" || reqs[0].key != reqs[1].key {
			t.Errorf("Idempotency-Key %q then %q: the retry must be the same logical call", reqs[0].key, reqs[1].key)
		}
		if n := src.calls.Load(); n != 2 {
			t.Errorf("%d token fetches, want 2", n)
		}
	})
	t.Run("refused again", func(t *testing.T) {
		api := newJWTAPI(t) // no token is accepted
		src := &tokens{life: hour}
		c := client.New(api.URL, client.WithBearerToken(src.fetch), fastRetry())
		_, err := c.Consume(context.Background(), "a-1", client.ConsumeInput{})
		var e *client.Error
		if !errors.Is(err, client.ErrUnauthorized) || !errors.As(err, &e) || e.Status != 401 {
			t.Fatalf("err %v, want ErrUnauthorized with status 401", err)
		}
		if reqs := api.requests(); len(reqs) != 2 || reqs[0].key != reqs[1].key {
			t.Errorf("%d requests (%+v), want 2 with one key: one refresh, then the 401 is the answer", len(reqs), reqs)
		}
		if n := src.calls.Load(); n != 2 {
			t.Errorf("%d token fetches, want 2", n)
		}
		if strings.Contains(err.Error(), "tok-") {
			t.Errorf("the error text carries a token: %v", err)
		}
	})
}

// TestBearerConcurrentCallsShareOneRefresh: many calls at once wait for one
// fetch of the token; when the API starts refusing that token, the calls
// that got 401 share one refresh too (each retries with the new token).
func TestBearerConcurrentCallsShareOneRefresh(t *testing.T) {
	t.Parallel()
	const callers, rounds = 32, 20
	fetches, retried := 0, 0
	for round := range rounds {
		api := newJWTAPI(t, "tok-1")
		src := &tokens{life: hour, gate: make(chan struct{})}
		c := client.New(api.URL, client.WithBearerToken(src.fetch), fastRetry())
		calls := func() {
			t.Helper()
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			for i := range callers {
				wg.Go(func() {
					_, err := c.GetAction(context.Background(), fmt.Sprintf("a-%d", i))
					errs <- err
				})
			}
			// Open the gate once every caller is waiting on the one fetch
			// (bounded poll: the fetch counts itself before it waits).
			for deadline := time.Now().Add(patience); src.calls.Load() == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no token fetch started")
				}
			}
			close(src.gate)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		calls()
		if n := src.calls.Load(); n != 1 {
			t.Fatalf("round %d: %d concurrent calls made %d token fetches, want 1", round, callers, n)
		}
		// The API now refuses tok-1 (revoked) and takes tok-2.
		api.accept("tok-1", false)
		api.accept("tok-2", true)
		src.gate = make(chan struct{})
		calls()
		if n := src.calls.Load(); n != 2 {
			t.Fatalf("round %d: %d concurrent calls refused with 401 made %d token fetches in all, want 2", round, callers, n)
		}
		fetches += int(src.calls.Load())
		for _, r := range api.requests() {
			if r.status == 401 {
				retried++
			}
		}
	}
	t.Logf("%d rounds of %d concurrent calls, twice each: %d token fetches in all (2 a round); %d calls got a 401 and were retried with the shared new token",
		rounds, callers, fetches, retried)
}

// TestBearerTokenSourceFailure: a token source that fails sends nothing and
// is not retried as if the API had not answered; its error is wrapped.
func TestBearerTokenSourceFailure(t *testing.T) {
	t.Parallel()
	api := newJWTAPI(t, "tok-1")
	idp := errors.New("issuer unreachable")
	src := &tokens{err: idp}
	c := client.New(api.URL, client.WithBearerToken(src.fetch), fastRetry())
	_, err := c.GetAction(context.Background(), "a-1")
	if !errors.Is(err, idp) {
		t.Fatalf("err %v, want the source's error", err)
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("%d requests sent without a token", n)
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("the source was called %d times, want 1 (the call fails with its error)", n)
	}
	empty := client.New(api.URL, client.WithBearerToken(func(context.Context) (string, time.Time, error) {
		return "", time.Time{}, nil
	}))
	if _, err := empty.GetAction(context.Background(), "a-1"); err == nil || len(api.requests()) != 0 {
		t.Errorf("an empty token: err %v, %d requests; want an error and none", err, len(api.requests()))
	}
}

// TestBearerWaiterCanGiveUp: a call waiting for another call's token fetch
// returns when its own context ends; the fetch goes on for the others.
func TestBearerWaiterCanGiveUp(t *testing.T) {
	t.Parallel()
	api := newJWTAPI(t, "tok-1")
	src := &tokens{life: hour, gate: make(chan struct{})}
	c := client.New(api.URL, client.WithBearerToken(src.fetch))
	first := make(chan error, 1)
	go func() { _, err := c.GetAction(context.Background(), "a-1"); first <- err }()
	for deadline := time.Now().Add(patience); src.calls.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no token fetch started")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	waiter := make(chan error, 1)
	go func() { _, err := c.GetAction(ctx, "a-2"); waiter <- err }()
	cancel()
	select {
	case err := <-waiter:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the waiter's call: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter whose context ended is still waiting for another call's fetch")
	}
	close(src.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("%d fetches, want 1", n)
	}
}

// TestBearerReplacesSigV4: the last of WithSigV4 and WithBearerToken is the
// one used (an API has one authorizer).
func TestBearerReplacesSigV4(t *testing.T) {
	t.Parallel()
	api := newJWTAPI(t, "tok-1")
	src := &tokens{life: hour}
	c := client.New(api.URL, client.WithSigV4(aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")}), client.WithBearerToken(src.fetch))
	if _, err := c.GetAction(context.Background(), "a-1"); err != nil {
		t.Fatal(err)
	}
	if r := api.requests()[0]; r.auth != "Bearer tok-1" {
		t.Errorf("Authorization %q, want the bearer token alone", r.auth)
	}
}

// patience bounds a test's wait for a condition: long enough for a busy
// machine, short enough to fail a test whose condition never comes.
const patience = 30 * time.Second
