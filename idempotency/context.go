package idempotency

import (
	"context"
	"time"
)

// Info describes the running first execution; the function reads it from its
// context with FromContext.
type Info struct {
	Key            string    // the key as stored (namespace and hashing applied)
	LeaseExpiresAt time.Time // after it another invocation may take the key over
}

type infoKey struct{}

func withInfo(ctx context.Context, i Info) context.Context {
	return context.WithValue(ctx, infoKey{}, i)
}

// FromContext returns the Info of the execution ctx belongs to; ok is false
// outside an idempotent execution.
func FromContext(ctx context.Context) (i Info, ok bool) {
	i, ok = ctx.Value(infoKey{}).(Info)
	return i, ok
}

// Outcome tells the caller of a wrapped function what happened.
type Outcome struct {
	Key       string // the key as stored
	Replayed  bool   // the function did not run: the response is the stored one
	FromCache bool   // the replay came from the in-memory cache (no request)
	// ExpiresAt is the end of a replayed record's retention.
	ExpiresAt time.Time
	// NoKey: the input had no key and the function ran unguarded
	// (Options.RunWithoutKey).
	NoKey bool
}

type outcomeKey struct{}

// WithOutcome returns a context that records, in *Outcome, whether the call
// made with it was a replay:
//
//	ctx, o := idempotency.WithOutcome(ctx)
//	out, err := handler(ctx, in)
//	if o.Replayed { … }
func WithOutcome(ctx context.Context) (context.Context, *Outcome) {
	o := &Outcome{}
	return context.WithValue(ctx, outcomeKey{}, o), o
}

// IsReplay reports whether ctx is the context a replay hook runs with.
func IsReplay(ctx context.Context) bool {
	o, ok := ctx.Value(outcomeKey{}).(*Outcome)
	return ok && o != nil && o.Replayed
}

func outcomeOf(ctx context.Context) *Outcome {
	o, _ := ctx.Value(outcomeKey{}).(*Outcome) // nil: none, or hidden by ownOutcome
	return o
}
