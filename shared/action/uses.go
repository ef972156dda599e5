package action

import (
	"slices"
	"strings"
	"time"
)

// Multi-use actions (licence seats, limited coupons, group tickets): an
// action created with maxUses N > 1 (or releasable) lets N callers, each
// named by a useId, take one use each. A useId takes at most one use and is
// answered the same way for it forever after; a releasable action's use can
// be given back, and its useId may take a use again later.

// MaxUsesLimit bounds maxUses: every use is kept on the action's own item,
// and what a write costs grows with the item (see the README's measurements).
const MaxUsesLimit = 1000

// Outcome codes of multi-use actions.
const (
	CodeNoUsesLeft    Code = "no_uses_left"
	CodeUseNotFound   Code = "use_not_found"
	CodeNotReleasable Code = "not_releasable"
)

// Use is one useId's latest use of a multi-use action.
type Use struct {
	At time.Time
	// N is how many uses were held right after this one was taken, so its
	// answer (usesHeld, usesRemaining) replays exactly.
	N      int
	Reason string
	// Write is the consume's Idempotency-Key digest and fingerprint (empty
	// without a key: the useId alone identifies the use).
	Write      Write
	ReleasedAt time.Time
	Release    Write // the release's key digest and fingerprint, as Write
}

// KeyedRelease is what a keyed release freed, kept under its key's digest:
// the useId, the use's take time, the release time and the release's
// fingerprint (digests only, never the key).
type KeyedRelease struct {
	UseID       string
	At          time.Time
	ReleasedAt  time.Time
	Fingerprint string
}

// Held reports whether the use is held (not released).
func (u Use) Held() bool { return u.ReleasedAt.IsZero() }

// HeldUse is a held use and its useId, as listings show it.
type HeldUse struct {
	ID string
	At time.Time
}

// MultiUse reports whether a is a multi-use action (consumes name a useId).
// A single-use action stores none of the multi-use fields.
func (a *Action) MultiUse() bool { return a.MaxUses > 0 }

// UsesRemaining is how many more uses a multi-use action can hold now.
func (a *Action) UsesRemaining() int { return max(a.MaxUses-a.UsesHeld, 0) }

// HeldUses lists the held uses in useId order.
func (a *Action) HeldUses() []HeldUse {
	out := make([]HeldUse, 0, a.UsesHeld)
	for id, u := range a.Uses {
		if u.Held() {
			out = append(out, HeldUse{ID: id, At: u.At})
		}
	}
	slices.SortFunc(out, func(x, y HeldUse) int { return strings.Compare(x.ID, y.ID) })
	return out
}

// AsUsed is a as the take of use u answered: every later change (other
// uses, a release, a cancellation) left out, so a repeated take answers
// byte for byte as the first.
func (a *Action) AsUsed(u Use) *Action {
	c := *a
	c.CanceledAt, c.CancelReason, c.ExpiredAt = time.Time{}, "", time.Time{}
	c.UsesHeld = u.N
	return &c
}

// ReleaseRequest is the body of POST /actions/{actionId}/uses/{useId}/release
// (empty, or {}).
type ReleaseRequest struct{}

// validateUses checks maxUses and releasable and sets them on a. A PIN
// guards one use; on a multi-use action it is refused (400), so every PIN
// promise keeps holding for the actions that have one.
func validateUses(r *CreateRequest, a *Action) error {
	n := 1
	if r.MaxUses != nil {
		if n = *r.MaxUses; n < 1 || n > MaxUsesLimit {
			return invalid("maxUses", "must be 1 to %d", MaxUsesLimit)
		}
	}
	if n == 1 && !r.Releasable {
		return nil // single-use: exactly as before
	}
	if r.PIN != "" {
		return invalid("pin", "cannot protect a multi-use action (maxUses > 1 or releasable): a PIN guards one use")
	}
	a.MaxUses, a.Releasable = n, r.Releasable
	return nil
}

// ValidateUseID checks a useId (from a consume body or a path): the
// character rules of ids.
func ValidateUseID(id string) error { return ValidateID("useId", id) }

// validateUseID checks a consume's optional useId.
func validateUseID(id string) error {
	if id == "" {
		return nil
	}
	return ValidateUseID(id)
}

// errUseIDRequired and errSingleUse refuse a consume that does not fit the
// action: nothing is written.
var (
	errUseIDRequired = &InvalidError{Field: "useId", Message: "is required: this action allows several uses, each named by its useId"}
	errSingleUse     = &InvalidError{Field: "useId", Message: "is only for an action with maxUses > 1 or releasable; this one is single-use"}
)

// ClassifyUse explains why a take's conditional write failed, from the item
// the write saw (nil when there was none). Precedence: not found, not a
// multi-use action, this useId's use (or this Idempotency-Key's), canceled,
// expired, not active, no uses left. A *Replay means the use is held by this
// useId already (or was taken by this keyed call): it is answered as its
// first take.
func ClassifyUse(old *Action, at Attempt) error {
	if old == nil {
		return Reject(CodeNotFound, nil)
	}
	if !old.MultiUse() {
		return errSingleUse
	}
	if u, ok := old.Uses[at.UseID]; ok && u.Held() {
		switch _, reused, err := idempotency(u.Write, at); {
		case err != nil:
			return err
		case reused:
			return Reject(CodeKeyReused, old)
		}
		return &Replay{Action: old}
	}
	if id, ok := old.UseKeys[at.Key]; ok && at.Key != "" {
		// The key took a use before: the same body replays that take, even
		// after its release; another body reuses the key.
		switch replay, _, err := idempotency(old.Uses[id].Write, at); {
		case err != nil:
			return err
		case replay && id == at.UseID:
			return &Replay{Action: old}
		}
		return Reject(CodeKeyReused, old)
	}
	if err := closed(old, at); err != nil {
		return err
	}
	if old.UsesHeld >= old.MaxUses {
		return Reject(CodeNoUsesLeft, old)
	}
	return Reject(CodeInternal, old)
}

// ClassifyRelease explains why a release's conditional write failed.
// Precedence: not found, not releasable, this Idempotency-Key's release (a
// *Replay of it, even after the useId took a use again; another body or
// useId reuses the key), use not found, already released (a *Replay:
// answered with the first release), canceled, expired.
func ClassifyRelease(old *Action, at Attempt) error {
	if old == nil {
		return Reject(CodeNotFound, nil)
	}
	if !old.Releasable {
		return Reject(CodeNotReleasable, old)
	}
	if r, ok := old.RelKeys[at.Key]; ok && at.Key != "" {
		w := Write{Key: at.Key, Fingerprint: r.Fingerprint}
		switch replay, _, err := idempotency(w, at); {
		case err != nil:
			return err
		case replay && r.UseID == at.UseID:
			// Answered as that release was: its use and times, whatever
			// the useId did since.
			c := *old
			c.Uses = make(map[string]Use, len(old.Uses))
			for id, u := range old.Uses {
				c.Uses[id] = u
			}
			c.Uses[r.UseID] = Use{At: r.At, ReleasedAt: r.ReleasedAt, Release: w}
			return &Replay{Action: &c}
		}
		return Reject(CodeKeyReused, old)
	}
	u, ok := old.Uses[at.UseID]
	if !ok {
		return Reject(CodeUseNotFound, old)
	}
	if !u.Held() {
		switch _, reused, err := idempotency(u.Release, at); {
		case err != nil:
			return err
		case reused:
			return Reject(CodeKeyReused, old)
		}
		return &Replay{Action: old}
	}
	if err := closed(old, at); err != nil {
		return err // a held use is never on a pending action: canceled or expired
	}
	return Reject(CodeInternal, old)
}

// closed is the refusal of an action canceled, expired, or not active yet
// at at.Now (in that precedence), or nil.
func closed(old *Action, at Attempt) error {
	switch {
	case !old.CanceledAt.IsZero():
		return Reject(CodeCanceled, old)
	case !old.ExpiredAt.IsZero() || !at.Now.Before(old.ExpiresAt):
		return Reject(CodeExpired, old)
	case at.Now.Before(old.ActiveAt):
		return Reject(CodeNotActive, old)
	}
	return nil
}
