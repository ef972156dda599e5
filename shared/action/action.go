// Package action holds the ExactOnce domain: the action record, its public
// state, request validation and the classification of a failed conditional
// write. It imports no AWS package; adapters translate to and from it.
package action

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// State is the public lifecycle state of an action.
type State string

// Public states. Cancellation is an operation, not a state: a canceled action
// reads as StateExpired with CanceledAt set.
const (
	StatePending  State = "pending"
	StateActive   State = "active"
	StateConsumed State = "consumed"
	StateExpired  State = "expired"
)

// DefaultMaxPINAttempts is how many wrong PINs lock an action when the
// creator does not say.
const DefaultMaxPINAttempts = 3

// Action is one stored action record. Zero times mean "not set".
type Action struct {
	// Tenant owns the action; ID is unique within the tenant (two tenants
	// may both have coupon-42).
	Tenant    string
	ID        string
	UserID    string
	Kind      string
	ActiveAt  time.Time
	ExpiresAt time.Time
	CreatedAt time.Time
	Metadata  map[string]string
	// Supersedes: created with "supersede": its order among the user's
	// other superseding creates of its kind is the supersede pointer's.
	Supersedes bool

	ConsumedAt     time.Time
	ConsumedReason string
	CanceledAt     time.Time
	CancelReason   string
	ExpiredAt      time.Time

	// PIN protection: PINHash is the HMAC of the PIN. Every guess reserves
	// one of MaxPINAttempts (PINFailures counts them) before it is compared;
	// a right guess gives its reservation back as it consumes. The write
	// that reaches the limit stamps LockedAt. PINTries records each guess by
	// the request that made it (TryToken; SpendToken for a reused key's
	// comparison), so a retry of it answers the same.
	PINHash        []byte
	PINFailures    int
	MaxPINAttempts int
	LockedAt       time.Time
	PINTries       map[string]PINTry
	// ConsumePINFailures is PINFailures as the consuming write left it
	// (nil for an action consumed without a PIN, or before it was
	// recorded): a replay of that consume answers with it, whatever was
	// counted since (a reused key's comparison spends guesses after it).
	ConsumePINFailures *int

	// KeyID names the key set that hashed the PIN and sealed the payload
	// ("" when the action has neither, or was written before key ids).
	KeyID string

	// Payload is the sealed (encrypted) payload, never plaintext.
	Payload []byte

	// Multi-use (see uses.go): MaxUses is 0 for a single-use action (the
	// item holds none of these), else N; UsesHeld is how many uses are held
	// (counted from the action's gates when the store reads it).
	MaxUses    int
	Releasable bool
	UsesHeld   int

	// Writes made by each operation, so a retried request is recognised from
	// the old item alone: the Idempotency-Key and request fingerprint of the
	// call, and the request id of the attempt that committed.
	Create  Write
	Consume Write
	Cancel  Write
}

// Write identifies the request that performed one operation on an action.
type Write struct {
	Key         string // keyed digest of the Idempotency-Key header, "" when none was sent
	Fingerprint string // keyed fingerprint of the canonical request body
	RequestID   string // API Gateway request id of the committing attempt
}

// PINTry is one PIN guess as its reservation recorded it: N is the guess's
// place in the count (so its answer, MaxPINAttempts-N remaining, replays
// exactly), Fingerprint the request's.
type PINTry struct {
	N           int
	Fingerprint string
}

// TryToken names a PIN guess by the request that made it: its
// Idempotency-Key when it sent one, else its request id (an SDK retry of a
// write whose answer was lost carries the same id).
func TryToken(w Write) string {
	if w.Key != "" {
		return "k" + w.Key
	}
	return "r" + w.RequestID
}

// SpendToken names the guess a request spends by reusing a key with
// another body on a PIN-protected action (the 422 path): its key and its
// body, so the same request re-sent (by the SDK after a lost answer, or by
// the caller) finds its guess counted, while another body under the key is
// another guess. Both parts are already keyed digests.
func SpendToken(w Write) string {
	sum := sha256.Sum256([]byte(w.Key + "\x00" + w.Fingerprint))
	return "s" + hex.EncodeToString(sum[:16])
}

// StateAt returns the public state of a at instant now.
func (a *Action) StateAt(now time.Time) State {
	switch {
	case !a.ConsumedAt.IsZero():
		return StateConsumed
	case !a.CanceledAt.IsZero(), !a.ExpiredAt.IsZero(), !now.Before(a.ExpiresAt):
		return StateExpired
	case now.Before(a.ActiveAt):
		return StatePending
	default:
		return StateActive
	}
}

// PINProtected reports whether consuming a needs a PIN.
func (a *Action) PINProtected() bool { return len(a.PINHash) > 0 }

// Locked reports whether wrong PINs have used up every attempt.
func (a *Action) Locked() bool {
	return a.PINProtected() && a.PINFailures >= a.MaxPINAttempts
}

// PINAttemptsRemaining is how many wrong PINs a may still take.
func (a *Action) PINAttemptsRemaining() int {
	if n := a.MaxPINAttempts - a.PINFailures; n > 0 {
		return n
	}
	return 0
}

// Finished reports whether a reached a final outcome (consumed, canceled or
// marked expired). Expiry by the clock alone is not a write, so it does not count.
func (a *Action) Finished() bool {
	return !a.ConsumedAt.IsZero() || !a.CanceledAt.IsZero() || !a.ExpiredAt.IsZero()
}

// Millis truncates t to the millisecond precision every stored time has, so
// what is written and what is read back compare equal.
func Millis(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// MaxClockSkew bounds how far the clocks of two API instances may differ.
// Supersede trusts creation times only beyond it: among superseding creates
// less than MaxClockSkew apart the store's pointer item's write order
// decides.
const MaxClockSkew = time.Second
