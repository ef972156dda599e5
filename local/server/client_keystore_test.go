package server_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/client"
	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/internal/testkit"
)

type payment struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

// TestKeyStore: the idempotency library over the hosted keys, with the
// first attempt of every HTTP call losing its answer after the server
// acted: one run, typed replays, payload mismatch (422 from the service),
// in progress while held, a failure released with a clean reason.
func TestKeyStore(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	c := newClient(env, &transport{after: firstAttemptOf()})
	var runs atomic.Int32
	entered, hold := make(chan struct{}), make(chan struct{})
	pay := idempotency.Wrap(func(ctx context.Context, p payment) (string, error) {
		runs.Add(1)
		switch p.Order {
		case "held":
			close(entered)
			<-hold
		case "fails":
			return "", errors.New("card declined\nline two " + strings.Repeat("x", 2000))
		case "huge":
			return strings.Repeat("x", 64<<10), nil // over the hosted API's 64 KiB
		}
		return "ch_" + p.Order, nil
	}, idempotency.Options[payment, string]{
		Store: c.KeyStore(), Namespace: "pay", Lease: 30 * time.Second,
		Key:     func(p payment) (string, error) { return p.Order, nil },
		Payload: func(p payment) (any, error) { return p, nil },
	})
	ctx := context.Background()
	for i := range 3 {
		ctx, o := idempotency.WithOutcome(ctx)
		r, err := pay(ctx, payment{"o-1", 500})
		if err != nil || r != "ch_o-1" || o.Replayed != (i > 0) {
			t.Fatalf("call %d: %q %v replayed=%v", i, r, err, o.Replayed)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("runs %d, want 1", runs.Load())
	}
	_, err := pay(ctx, payment{"o-1", 501})
	if !errors.Is(err, idempotency.ErrPayloadMismatch) || !errors.Is(err, client.ErrFingerprintMismatch) {
		t.Fatalf("other payload: %v", err)
	}

	done := make(chan error)
	go func() { _, err := pay(ctx, payment{"held", 1}); done <- err }()
	<-entered
	_, err = pay(ctx, payment{"held", 1})
	close(hold)
	if err := <-done; err != nil {
		t.Fatalf("holder: %v", err)
	}
	var ip *idempotency.InProgressError
	if !errors.As(err, &ip) || ip.RetryAfter <= 0 {
		t.Fatalf("while held: %v", err)
	}

	if _, err := pay(ctx, payment{"fails", 1}); err == nil || !strings.HasPrefix(err.Error(), "card declined") {
		t.Fatalf("failing effect: %v", err)
	}
	// Wrap stores a fixed reason: no error text (it may carry payload) leaves the process.
	k, err := c.GetKey(ctx, "pay:fails")
	if err != nil || k.State != "failed" || k.Failures != 1 || k.LastError != "handler returned an error" {
		t.Fatalf("released key: %+v %v", k, err)
	}
	// A response over the hosted limit: the effect ran, so the key is not
	// released (issue 21 item 1); it stays held until its lease ends.
	if _, err := pay(ctx, payment{"huge", 1}); !errors.Is(err, idempotency.ErrResponseTooLarge) {
		t.Fatalf("huge response: %v, want ErrResponseTooLarge", err)
	}
	if _, err := pay(ctx, payment{"huge", 1}); !errors.Is(err, idempotency.ErrInProgress) || runs.Load() != 4 {
		t.Fatalf("huge response, again: %v (runs %d), want ErrInProgress and no second run", err, runs.Load())
	}
	// Do too: the error comes back to its caller, and the key keeps the
	// fixed reason, never the error's text (here a card number), which GET
	// /keys would show for the key's retention.
	if _, err := c.Do(ctx, "do-fails", "f", 0, func(context.Context) (any, error) {
		return nil, errors.New("card 4111111111111111 declined")
	}); err == nil || !strings.Contains(err.Error(), "declined") {
		t.Fatalf("Do: %v, want the effect's error", err)
	}
	k, err = c.GetKey(ctx, "do-fails")
	if err != nil || k.Failures != 1 || k.LastError != "handler returned an error" {
		t.Fatalf("Do's released key: %+v %v", k, err)
	}
}

// TestKeyStoreRefusalsAreOneLine: a refusal of the hosted keys that the
// library also understands (fingerprint mismatch, in progress, lease lost)
// is one error whose text is the API's, on one line: it goes to logs as it
// is. errors.Is finds both the API's code and the library's error.
func TestKeyStoreRefusalsAreOneLine(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	c := client.New(env.URL)
	ctx := context.Background()
	k, err := c.Claim(ctx, "one-line", "sha256:9f2c", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "one-line-held", "f", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, "one-line", k.Token, map[string]string{"charge": "ch_1"}); err != nil {
		t.Fatal(err)
	}
	store := c.KeyStore()
	for _, tc := range []struct {
		name      string
		call      func() error
		api, want error
	}{
		{"Do with another fingerprint", func() error {
			_, err := c.Do(ctx, "one-line", "amount=500&card=tok_1", time.Minute, func(context.Context) (any, error) { return 1, nil })
			return err
		}, client.ErrFingerprintMismatch, idempotency.ErrPayloadMismatch},
		{"claim while held", func() error {
			_, err := store.Claim(ctx, "one-line-held", idempotency.Claim{Fingerprint: "f", Lease: time.Minute, Now: time.Now()})
			return err
		}, client.ErrInProgress, nil},
		{"release a key nobody claimed", func() error {
			_, err := store.Release(ctx, "one-line-never", k.Token, "declined", time.Now())
			return err
		}, client.ErrNotFound, nil},
	} {
		err := tc.call()
		if !errors.Is(err, tc.api) {
			t.Errorf("%s: %v, want the API's %v", tc.name, err, tc.api)
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want the library's %v", tc.name, err, tc.want)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\n\r") {
			t.Errorf("%s: the error text has a line break: %q", tc.name, err.Error())
		}
		t.Logf("%s: %v", tc.name, err)
	}
}

// TestDoKeepsKeyHeldWhenResultCannotBeEncoded: fn ran (its effect
// happened) but its result is not JSON (NaN): Do reports
// ErrResponseNotStored and the key stays held, so a second Do under the key
// while the lease runs waits instead of running fn again.
func TestDoKeepsKeyHeldWhenResultCannotBeEncoded(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	c := client.New(env.URL)
	ctx := context.Background()
	var effects atomic.Int32
	fn := func(context.Context) (any, error) {
		effects.Add(1) // e.g. the card is charged
		return map[string]float64{"amount": math.NaN()}, nil
	}
	_, err := c.Do(ctx, "do-nan", "fp", time.Minute, fn)
	if !errors.Is(err, idempotency.ErrResponseNotStored) {
		t.Errorf("first Do: %v, want ErrResponseNotStored", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	_, err2 := c.Do(wctx, "do-nan", "fp", time.Minute, fn)
	if n := effects.Load(); n != 1 {
		t.Fatalf("fn ran %d times under one key, want 1 (second Do: %v)", n, err2)
	}
	if !errors.Is(err2, context.DeadlineExceeded) {
		t.Errorf("second Do while the key is held: %v, want to wait until its context ends", err2)
	}
	k, err := c.GetKey(ctx, "do-nan")
	if err != nil || k.State != "in_progress" || k.Failures != 0 {
		t.Fatalf("the key after fn ran: %+v %v, want in_progress, never released", k, err)
	}
}
