package service

import (
	"context"
	"slices"
	"time"

	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
)

// ConsumeRequest is a request to consume an action.
type ConsumeRequest struct {
	Tenant string // whose action: the id is looked up in its key space
	Reason string
	// PIN is nil when the request carried no PIN; else it reports whether
	// the presented PIN matches the action's stored hash.
	PIN          func(*action.Action) bool
	Write        action.Write
	Fingerprints []string // the request's under every known key set
	// KeyIDs are the key sets this server knows: an action under another
	// is refused before anything is written (see action.UnknownKeyError).
	KeyIDs []string
	// Now is the request's time: the first write's.
	Now time.Time
	// Clock is read for the time of a second write (a right PIN's consume,
	// a reused key's guess): the write that makes the change stamps its own
	// time (consumedAt, lockedAt), however long the first took. nil: Now.
	Clock func() time.Time
}

// later is the time of a second write.
func (c *ConsumeRequest) later() time.Time {
	if c.Clock == nil {
		return action.Millis(c.Now)
	}
	return action.Millis(c.Clock())
}

// Consume moves the action to consumed and returns it as written.
//
// Without a PIN it is one conditional write. With a PIN the guess is counted
// before it is compared, so at most maxPinAttempts guesses are ever
// evaluated whatever the concurrency: write 1 reserves a guess
// (store.ReserveGuess) and returns the item; the PIN is compared with it; a
// wrong PIN is answered at once (1 request), a right one consumes with write
// 2, which gives the reservation back and stamps consumedAt with its own
// time (c.Clock). A retry of the same request (a lost answer the SDK
// re-sends, the same Idempotency-Key) finds its own reservation and answers
// as the first time, counting nothing. A refusal that compared the request
// with a stored body holding the PIN is counted as a guess (spendIfGuess).
func Consume(ctx context.Context, st *store.Store, id string, c ConsumeRequest) (*action.Action, error) {
	w := store.Consume{Tenant: c.Tenant, Reason: c.Reason, Write: c.Write, Fingerprints: c.Fingerprints, KeyIDs: c.KeyIDs,
		Now: action.Millis(c.Now), PINPresented: c.PIN != nil}
	spend := func(why error) error {
		return spendIfGuess(ctx, st, c.Tenant, id, c.Write, c.Fingerprints, c.later, why)
	}
	consume := func(w store.Consume) (*action.Action, error) {
		a, err := st.Consume(ctx, id, w)
		if err != nil {
			return nil, spend(err)
		}
		return a, nil
	}
	if c.PIN == nil {
		return consume(w)
	}
	// judge compares the PIN of a reserved guess (try) with the item: a
	// wrong one is answered with the attempts that remained after it, a
	// right one consumes at its own time.
	judge := func(a *action.Action, try action.PINTry) (*action.Action, error) {
		if !c.PIN(a) {
			seen := *a
			seen.PINFailures = try.N
			return nil, action.Reject(action.CodeInvalidPIN, &seen)
		}
		w.Now, w.Reserved = c.later(), true
		return consume(w)
	}
	token := action.TryToken(c.Write)
	reserved, old, err := st.ReserveGuess(ctx, id, w)
	if err != nil {
		return nil, err
	}
	if old == nil {
		return judge(reserved, reserved.PINTries[token])
	}
	if try, ok := old.PINTries[token]; ok { // this request's own guess, retried
		// Nothing is judged against a record this server cannot verify.
		if old.KeyID != "" && !slices.Contains(c.KeyIDs, old.KeyID) {
			return nil, &action.UnknownKeyError{KeyID: old.KeyID}
		}
		if err := action.Comparable(try.Fingerprint, c.Fingerprints); err != nil {
			return nil, err
		}
		if !slices.Contains(c.Fingerprints, try.Fingerprint) {
			// The key's first request held a PIN too: comparing with it is a guess.
			return nil, spend(action.Reject(action.CodeKeyReused, old))
		}
		return judge(old, try)
	}
	at := action.Attempt{Now: w.Now, Key: c.Write.Key, Fingerprints: c.Fingerprints, RequestID: c.Write.RequestID, PINPresented: true}
	why := action.ClassifyConsume(old, at)
	if r, ok := why.(*action.Rejection); ok && r.Code == action.CodeInternal {
		switch {
		case !slices.Contains(c.KeyIDs, old.KeyID) && old.KeyID != "":
			return nil, &action.UnknownKeyError{KeyID: old.KeyID}
		case !old.PINProtected(): // a PIN for an action that has none: a plain consume
			w.Now = c.later()
			return consume(w)
		}
	}
	return nil, spend(why)
}

// Create writes a new action (store.Create); a refusal that compared the
// request with a stored body holding the PIN (a reused key) is counted as a
// guess at the time clock reads then (nil: a.CreatedAt).
func Create(ctx context.Context, st *store.Store, a *action.Action, fingerprints []string, clock func() time.Time) (*action.Action, error) {
	created, err := st.Create(ctx, a, fingerprints)
	if err != nil {
		if clock == nil {
			clock = func() time.Time { return a.CreatedAt }
		}
		return nil, spendIfGuess(ctx, st, a.Tenant, a.ID, a.Create, fingerprints, clock, err)
	}
	return created, nil
}

// FindCreate answers a create that can no longer be written
// (store.FindCreate), counting a comparison with a stored PIN as Create does.
func FindCreate(ctx context.Context, st *store.Store, tenantName, id string, w action.Write, fingerprints []string, clock func() time.Time) error {
	return spendIfGuess(ctx, st, tenantName, id, w, fingerprints, clock, st.FindCreate(ctx, tenantName, id, w, fingerprints))
}

// spendIfGuess passes why through, unless it is a refusal that compared the
// request w with a stored body holding the PIN (action.IsGuess): then that
// comparison is counted like any guess (store.SpendGuess, at the time clock
// reads then), and its refusal is the answer.
func spendIfGuess(ctx context.Context, st *store.Store, tenantName, id string, w action.Write, fingerprints []string, clock func() time.Time, why error) error {
	if !action.IsGuess(why) {
		return why
	}
	return st.SpendGuess(ctx, tenantName, id, w, action.Millis(clock()), fingerprints...)
}
