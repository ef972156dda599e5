// Package idempotency makes a Lambda handler, or any function, idempotent:
// under one key its effect runs once, and every later invocation gets the
// stored response back, typed.
//
//	charge := idempotency.Wrap(chargeCard, idempotency.Options[Order, Receipt]{
//		Store: dynamostore.New(db, "idempotency"),
//		Key:   func(o Order) (string, error) { return o.ID, nil },
//	})
//
// Each invocation claims its key with one conditional write that also takes
// a lease and a fencing token; the first claimant runs the function and
// completes the key with the response (one more write), or releases it when
// the function fails or panics, so a retry runs it again. A claim refused by
// its condition gets the existing record in the same answer, and that record
// is checked against the invocation's payload before anything else: a key
// reused with another payload is ErrPayloadMismatch whatever the record's
// state (the check Powertools' Python, TypeScript and Java ports once skipped
// on that path). A holder whose lease lapsed and was taken over can no longer
// complete or release the key (ErrLeaseLost): the takeover's result stands.
//
// Keys live behind Persistence: a DynamoDB table of your own
// (idempotency/dynamostore) or the hosted ExactOnce keys API (client.KeyStore).
// The claim, complete and release logic is the same code the ExactOnce
// service runs for its /keys routes and events/once runs for events.
package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/exactonce/exactonce/shared/idemkey"
)

// Record is an idempotency key's record as a Persistence returns it.
type Record = idemkey.Key

// Claim is one claim as a Persistence receives it.
type Claim = idemkey.Claim

// Persistence keeps key records. Each method must be one atomic
// conditional write, and explain a refused one with shared/idemkey's
// classification: *idemkey.Replay (a completed key, or this caller's own
// write whose answer was lost) or *idemkey.Rejection (fingerprint_mismatch,
// in_progress, lease_lost, …). Claim must refuse another fingerprint in
// every state.
type Persistence interface {
	Claim(ctx context.Context, key string, c Claim) (*Record, error)
	Complete(ctx context.Context, key, token string, response []byte, now time.Time) (*Record, error)
	Release(ctx context.Context, key, token, reason string, now time.Time) (*Record, error)
}

// Defaults.
const (
	// DefaultLease is how long a claim holds its key when Options.Lease is
	// zero. It is independent of the function's timeout: set it above the
	// function's longest run (a Lambda's timeout) and below how long a retry
	// may wait.
	DefaultLease = time.Minute
	// MaxResponseBytes bounds a stored response (its JSON), as the hosted
	// keys API does.
	MaxResponseBytes = idemkey.MaxResponseBytes
)

// Errors. Compare with errors.Is.
var (
	// ErrInProgress: another invocation holds the key and its lease runs.
	// The error is an *InProgressError saying when the lease ends; retry
	// after it (a batch helper reports the record as failed).
	ErrInProgress = errors.New("idempotency: another invocation holds the key")
	// ErrPayloadMismatch: the key was used before with another payload.
	ErrPayloadMismatch = errors.New("idempotency: key reused with another payload")
	// ErrLeaseLost: the function outlived its lease and another invocation
	// took the key over; this invocation's result was not stored (the
	// takeover's stands). Raise the lease above the function's longest run.
	ErrLeaseLost = errors.New("idempotency: the lease lapsed and another invocation took the key over")
	// ErrNoKey: the key function returned "".
	ErrNoKey = errors.New("idempotency: no idempotency key in the input")
	// ErrResponseTooLarge: the response's JSON is over MaxResponseBytes; the
	// key was released.
	ErrResponseTooLarge = errors.New("idempotency: response larger than MaxResponseBytes")
)

// InProgressError is ErrInProgress with the time the holder's lease ends.
type InProgressError struct {
	RetryAfter time.Duration
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("%s (lease ends in %s)", ErrInProgress, e.RetryAfter.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrInProgress) true.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// Call is one guarded execution, for Run.
type Call struct {
	Key         string
	Fingerprint string        // of the payload that must not change under Key
	Lease       time.Duration // 0: DefaultLease
	// Release reports whether fn's error releases the key (a retry runs fn
	// again at once). nil: every error does. An error it keeps holds the key
	// until the lease lapses: use it for outcomes that are unknown (a timeout
	// after the request went out), where an immediate re-run could double
	// the effect. A panic always releases.
	Release func(error) bool
	// Reason is the text a release stores on the key (it is readable through
	// GET /keys). nil: a fixed text, so no error detail is stored.
	Reason func(error) string
	Now    func() time.Time // nil: time.Now
}

// Result is what Run returns besides an error.
type Result struct {
	// Response is the stored response: fn's on a first execution, the
	// record's on a replay.
	Response []byte
	// Replayed: fn did not run; Response is the completed key's.
	Replayed bool
	// Record is the key as the last write left it (nil for some hosted answers).
	Record *Record
}

// Run is the one flow every idempotent call goes through: claim (one write),
// then on a granted claim fn and complete (one write) or release (one
// write); on a completed key the stored response; otherwise the refusal as
// an error (ErrPayloadMismatch, ErrInProgress). fn's own error is returned
// as it is. A panic in fn releases the key and panics on.
func Run(ctx context.Context, p Persistence, c Call, fn func(context.Context) ([]byte, error)) (Result, error) {
	if c.Key == "" {
		return Result{}, ErrNoKey
	}
	now := c.now()
	lease := c.Lease
	if lease <= 0 {
		lease = DefaultLease
	}
	k, err := p.Claim(ctx, c.Key, Claim{Now: now, Fingerprint: c.Fingerprint, Lease: lease, Token: idemkey.NewToken()})
	var replay *idemkey.Replay
	var rej *idemkey.Rejection
	switch {
	case errors.As(err, &replay) && !replay.Key.CompletedAt.IsZero():
		// Belt and braces: a Persistence must refuse another fingerprint,
		// and the record it returned is checked again here.
		if f := replay.Key.Fingerprint; f != "" && f != c.Fingerprint {
			return Result{}, ErrPayloadMismatch
		}
		return Result{Response: replay.Key.Response, Replayed: true, Record: replay.Key}, nil
	case errors.As(err, &replay): // our own claim, its answer lost: we hold the key
		k = replay.Key
	case errors.As(err, &rej) && rej.Code == idemkey.CodeFingerprintMismatch:
		return Result{}, fmt.Errorf("%w (%w)", ErrPayloadMismatch, err)
	case errors.As(err, &rej) && rej.Code == idemkey.CodeInProgress:
		wait := time.Second
		if rej.Key != nil {
			wait = max(rej.Key.LeaseExpiresAt.Sub(now), 0)
		}
		return Result{}, &InProgressError{RetryAfter: wait}
	case err != nil:
		return Result{}, fmt.Errorf("idempotency: claim: %w", err)
	}
	if k.Fingerprint != "" && k.Fingerprint != c.Fingerprint {
		return Result{}, ErrPayloadMismatch // a Persistence that broke its contract
	}
	token := k.Token
	// Writes after fn must happen even if ctx ended meanwhile: the key must
	// not wait out its lease.
	wctx := context.WithoutCancel(ctx)

	defer func() {
		if r := recover(); r != nil {
			_, _ = p.Release(wctx, c.Key, token, "handler panicked", c.now())
			panic(r)
		}
	}()
	resp, fnErr := fn(withInfo(ctx, Info{Key: c.Key, LeaseExpiresAt: k.LeaseExpiresAt}))
	if fnErr == nil && len(resp) > MaxResponseBytes {
		fnErr = ErrResponseTooLarge
	}
	if fnErr != nil {
		if c.Release != nil && fnErr != ErrResponseTooLarge && !c.Release(fnErr) {
			return Result{Record: k}, fnErr
		}
		reason := "handler returned an error"
		if c.Reason != nil {
			reason = c.Reason(fnErr)
		}
		rec, err := p.Release(wctx, c.Key, token, reason, c.now())
		switch {
		case errors.As(err, &replay), errors.As(err, &rej) && rej.Code != idemkey.CodeInternal:
			// released already, or taken over (lease_lost, or the takeover
			// completed it, or it is gone): nothing of ours to give up
		case err != nil:
			return Result{Record: k}, errors.Join(fnErr, fmt.Errorf("idempotency: release (the key frees itself when its lease lapses): %w", err))
		}
		if rec == nil {
			rec = k
		}
		return Result{Record: rec}, fnErr
	}
	rec, err := p.Complete(wctx, c.Key, token, resp, c.now())
	switch {
	case errors.As(err, &replay): // our own complete, its answer lost
		rec = replay.Key
	case errors.As(err, &rej) && (rej.Code == idemkey.CodeLeaseLost || rej.Code == idemkey.CodeNotFound):
		return Result{Record: rej.Key}, fmt.Errorf("%w (%w)", ErrLeaseLost, err)
	case err != nil:
		return Result{Record: k}, fmt.Errorf("idempotency: complete (the effect happened; the key frees itself when its lease lapses): %w", err)
	}
	return Result{Response: resp, Record: rec}, nil
}

func (c *Call) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
