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
// reused with another payload is ErrPayloadMismatch while the record holds a
// response or a running (or lapsed) attempt (the check Powertools' Python,
// TypeScript and Java ports once skipped on that path); a released key has
// nothing to protect and is claimed by any payload. A function whose response
// cannot be stored keeps its key held (ErrResponseNotStored): its effect
// happened, so no retry may run it again. A holder whose lease lapsed and was taken over can no longer
// complete or release the key (ErrLeaseLost): the takeover's result stands.
// A claim answered after half its lease (a slow connection, or the SDK's
// retries of lost answers) does not run the function: it gives the key back
// and is ErrInProgress (InProgressError.Late), to retry.
//
// Keys live behind Persistence: a DynamoDB table of your own
// (idempotency/dynamostore) or the hosted ExactOnce keys API (client.KeyStore).
// This package holds the key lifecycle's rules (Record, Claim, and the
// Classify functions that explain a refused write): the ExactOnce service's
// /keys routes and events/once run the same rules and the same table code.
package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Persistence keeps key records. Each method must be one atomic
// conditional write, and explain a refused one with ClassifyClaim,
// ClassifyComplete or ClassifyRelease: *Replay (a completed key, or this
// caller's own write whose answer was lost) or *Rejection
// (fingerprint_mismatch, in_progress, lease_lost, …). Claim must refuse another fingerprint in
// every state but a released one when the claim says AnyAfterRelease (Run's
// claims do: a released attempt has no response to protect; the hosted keys
// refuse it there too). A record keeps the token of its latest release
// (ReleasedToken) through later claims, so that release sent again answers
// as it did (a *Replay, or from the hosted keys the key as it is now) even
// once another caller has taken the key.
type Persistence interface {
	Claim(ctx context.Context, key string, c Claim) (*Record, error)
	Complete(ctx context.Context, key, token string, response []byte, now time.Time) (*Record, error)
	Release(ctx context.Context, key, token, reason string, now time.Time) (*Record, error)
}

// Holder is a Persistence that can keep a key held for the rest of its
// retention (one conditional write by the holder of token, storing reason
// as the key's last error): Run does so when the function ran but its
// response cannot be stored, so no retry runs the effect again.
// dynamostore.Table is one; without it such a key stays held until its
// lease lapses.
type Holder interface {
	Hold(ctx context.Context, key, token, reason string, now time.Time) (*Record, error)
}

// ResponseLimiter is a Persistence that stores responses of at most
// MaxResponseBytes() bytes (the hosted keys: MaxHostedResponseBytes);
// without it the limit is MaxResponseBytes.
type ResponseLimiter interface {
	MaxResponseBytes() int
}

// Defaults.
const (
	// DefaultLease is how long a claim holds its key when Options.Lease is
	// zero. It is independent of the function's timeout: set it above the
	// function's longest run (a Lambda's timeout) plus the claim's and the
	// complete's answers (the SDK's retries included), and below how long a
	// retry may wait. A claim answered after half of it does not run the
	// function (InProgressError.Late).
	DefaultLease = time.Minute
	// MaxResponseBytes bounds a stored response (its JSON): what one
	// DynamoDB item (400 KB) holds beside the key's own attributes, each
	// bounded: a partition key of at most 2 KiB and its name of at most 255
	// bytes (DynamoDB's limits), a fingerprint and claim fields of at most
	// 256 characters each (Claim.Validate, checked before the
	// claim), a last error of at most 1024 characters (FitError, on
	// every release and hold), and fixed-size times, tokens and counters:
	// under 12 KiB in all; 16 KiB are left.
	// A larger response is ErrResponseTooLarge and the key stays held.
	MaxResponseBytes = 400<<10 - 16<<10
	// NotStoredReason is the last error a key held for good after its
	// response could not be stored carries (see Holder).
	NotStoredReason = "the function ran but its response could not be stored"
)

// Errors. Compare with errors.Is.
var (
	// ErrInProgress: another invocation holds the key and its lease runs,
	// or this invocation's claim was answered too late to run the function
	// (Late). The error is an *InProgressError saying when to retry (a batch
	// helper reports the record as failed).
	ErrInProgress = errors.New("idempotency: another invocation holds the key")
	// ErrPayloadMismatch: the key was used before with another payload.
	ErrPayloadMismatch = errors.New("idempotency: key reused with another payload")
	// ErrLeaseLost: the function outlived its lease and another invocation
	// took the key over; this invocation's result was not stored (the
	// takeover's stands). Raise the lease above the function's longest run.
	ErrLeaseLost = errors.New("idempotency: the lease lapsed and another invocation took the key over")
	// ErrNoKey: the key function returned "".
	ErrNoKey = errors.New("idempotency: no idempotency key in the input")
	// ErrResponseNotStored: the function ran (its effect happened) but its
	// response could not be stored (not JSON-encodable, or too large). The
	// key stays held, in progress, for the rest of its retention (see
	// Holder), so no retry runs the effect again: later invocations get an
	// *InProgressError that also matches ErrResponseNotStored.
	ErrResponseNotStored = errors.New("idempotency: the function ran but its response could not be stored; the key stays held")
	// ErrResponseTooLarge: the response's JSON is over MaxResponseBytes (or
	// the store's ResponseLimiter); it is also ErrResponseNotStored.
	ErrResponseTooLarge = fmt.Errorf("%w: response larger than MaxResponseBytes", ErrResponseNotStored)
)

// InProgressError is ErrInProgress with the time the holder's lease ends.
type InProgressError struct {
	RetryAfter time.Duration
	// NotStored: the holder ran the function but could not store its
	// response; the key is held until its retention ends.
	NotStored bool
	// Late: this invocation's own claim was answered after half the lease
	// the store granted had gone (measured on Call.Now), so the function did
	// not run and the claim was released (see Run): the release counts as a
	// failure of the key and its last error says so. RetryAfter is 0 once
	// it was released or the key is completed; the rest of this claim's
	// lease if the release failed; another holder's lease end (at most this
	// claim's lease) if one took the key over.
	Late bool
}

func (e *InProgressError) Error() string {
	if e.Late {
		return fmt.Sprintf("%s: the claim was answered after half its lease; the function did not run (retry in %s)", ErrInProgress, e.RetryAfter.Round(time.Millisecond))
	}
	if e.NotStored {
		return fmt.Sprintf("%s: %s (held for %s more)", ErrInProgress, NotStoredReason, e.RetryAfter.Round(time.Second))
	}
	return fmt.Sprintf("%s (lease ends in %s)", ErrInProgress, e.RetryAfter.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrInProgress) true, and errors.Is(err,
// ErrResponseNotStored) for a key held after its response could not be
// stored.
func (e *InProgressError) Is(target error) bool {
	return target == ErrInProgress || e.NotStored && target == ErrResponseNotStored
}

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
	// GET /keys), fitted by FitError: printable, at most 1024
	// characters. nil: a fixed text, so no error detail is stored.
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
// as it is. A panic in fn releases the key and panics on. When fn ran but
// its response cannot be stored (fn's error wraps ErrResponseNotStored, or
// the response is too large), the key is not released: it stays held (one
// write, see Holder) and the error wraps ErrResponseNotStored. A claim
// answered after half its lease is released (one write) and fn does not
// run: whoever took the key over when the lease lapsed ran it already, or
// the rest of the lease may not cover fn; the error is an *InProgressError
// with Late set.
func Run(ctx context.Context, p Persistence, c Call, fn func(context.Context) ([]byte, error)) (Result, error) {
	if c.Key == "" {
		return Result{}, ErrNoKey
	}
	now := c.now()
	lease := c.Lease
	if lease <= 0 {
		lease = DefaultLease
	}
	claim := Claim{Now: now, Fingerprint: c.Fingerprint, Lease: lease, Token: NewToken(), AnyAfterRelease: true}
	if err := claim.Validate(); err != nil {
		// Refused before the effect: a key whose item could not also hold
		// the response would let a retry run the effect again.
		return Result{}, fmt.Errorf("idempotency: %w", err)
	}
	k, err := p.Claim(ctx, c.Key, claim)
	var replay *Replay
	var rej *Rejection
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
	case errors.As(err, &rej) && rej.Code == CodeFingerprintMismatch:
		return Result{}, fmt.Errorf("%w (%w)", ErrPayloadMismatch, err)
	case errors.As(err, &rej) && rej.Code == CodeInProgress:
		wait, notStored := time.Second, false
		if rej.Key != nil {
			wait = max(rej.Key.LeaseExpiresAt.Sub(now), 0)
			notStored = rej.Key.LastError == NotStoredReason
		}
		return Result{}, &InProgressError{RetryAfter: wait, NotStored: notStored}
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
	// The lease the store granted, both ends on its clock (the hosted keys
	// give at least 1 s, in whole seconds): half of it is measured on ours.
	granted := lease
	if g := k.LeaseExpiresAt.Sub(k.ClaimedAt); !k.ClaimedAt.IsZero() && g > 0 {
		granted = g
	}
	if c.now().Sub(now) > granted/2 {
		return late(wctx, p, c, k, now, granted)
	}

	defer func() {
		if r := recover(); r != nil {
			_, _ = p.Release(wctx, c.Key, token, "handler panicked", c.now())
			panic(r)
		}
	}()
	resp, fnErr := fn(withInfo(ctx, Info{Key: c.Key, LeaseExpiresAt: k.LeaseExpiresAt}))
	switch {
	case fnErr != nil:
	case len(resp) > maxResponse(p):
		fnErr = fmt.Errorf("%w (%d bytes, at most %d)", ErrResponseTooLarge, len(resp), maxResponse(p))
	case !utf8.Valid(resp):
		// A stored response is a string: bytes that are not UTF-8 would
		// come back as other bytes (or, grown by replacement characters,
		// not fit the item at all), so such a response is not stored.
		fnErr = fmt.Errorf("%w: the response is not valid UTF-8", ErrResponseNotStored)
	}
	if errors.Is(fnErr, ErrResponseNotStored) {
		return hold(wctx, p, c, k, fnErr)
	}
	if fnErr != nil {
		if c.Release != nil && !c.Release(fnErr) {
			return Result{Record: k}, fnErr
		}
		reason := "handler returned an error"
		if c.Reason != nil {
			reason = FitError(c.Reason(fnErr))
		}
		rec, err := p.Release(wctx, c.Key, token, reason, c.now())
		switch {
		case errors.As(err, &replay), errors.As(err, &rej):
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
	case errors.As(err, &rej) && (rej.Code == CodeLeaseLost || rej.Code == CodeNotFound):
		return Result{Record: rej.Key}, fmt.Errorf("%w (%w)", ErrLeaseLost, err)
	case err != nil:
		return Result{Record: k}, fmt.Errorf("idempotency: complete (the effect happened; the key frees itself when its lease lapses): %w", err)
	}
	return Result{Response: resp, Record: rec}, nil
}

// late gives back a claim answered after half its lease had gone (a slow
// connection, or the SDK's retries of lost answers): the rest of the lease
// may not cover fn and its complete, and whoever takes the key over after
// the lease runs the effect too. One write; fn does not run. The wait it
// reports is bounded by the granted lease: a store's times may be on
// another clock than c.now's (the hosted keys').
func late(ctx context.Context, p Persistence, c Call, k *Record, start time.Time, granted time.Duration) (Result, error) {
	busy := &InProgressError{Late: true}
	// left: the key as the release left it (or found it).
	left, err := p.Release(ctx, c.Key, k.Token, "the claim was answered too late to run the function", c.now())
	var rej *Rejection
	var replay *Replay
	switch {
	case errors.As(err, &rej):
		left = rej.Key // lease_lost: the takeover's lease
	case errors.As(err, &replay):
		left = replay.Key // released (its answer lost), and perhaps taken since
	case err != nil:
		busy.RetryAfter = max(start.Add(granted).Sub(c.now()), 0) // ours, perhaps, until it lapses
	}
	if left != nil && left.CompletedAt.IsZero() && !left.LeaseExpiresAt.IsZero() {
		busy.RetryAfter = min(max(left.LeaseExpiresAt.Sub(c.now()), 0), granted) // another's lease
	}
	return Result{Record: k}, busy
}

// hold keeps the key held after fn ran but its response cannot be stored:
// releasing it would let a retry run the effect again.
func hold(ctx context.Context, p Persistence, c Call, k *Record, cause error) (Result, error) {
	h, ok := p.(Holder)
	if !ok {
		return Result{Record: k}, fmt.Errorf("%w; key %s stays held until its lease ends at %s", cause, c.Key, k.LeaseExpiresAt.Format(time.RFC3339))
	}
	rec, err := h.Hold(ctx, c.Key, k.Token, NotStoredReason, c.now())
	var rej *Rejection
	switch {
	case errors.As(err, &rej) && (rej.Code == CodeLeaseLost || rej.Code == CodeNotFound):
		return Result{Record: rej.Key}, fmt.Errorf("%w; %w (%w)", cause, ErrLeaseLost, err)
	case err != nil:
		return Result{Record: k}, errors.Join(cause, fmt.Errorf("idempotency: hold (the key frees itself when its lease lapses): %w", err))
	}
	return Result{Record: rec}, fmt.Errorf("%w; key %s stays held (in progress) until %s", cause, c.Key, rec.LeaseExpiresAt.Format(time.RFC3339))
}

func maxResponse(p Persistence) int {
	if l, ok := p.(ResponseLimiter); ok {
		return l.MaxResponseBytes()
	}
	return MaxResponseBytes
}

func (c *Call) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
