// Package action holds the ExactOnce domain: the action record, its public
// state, request validation and the classification of a failed conditional
// write. It imports no AWS package; adapters translate to and from it.
package action

import (
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
	ID        string
	UserID    string
	Kind      string
	ActiveAt  time.Time
	ExpiresAt time.Time
	CreatedAt time.Time
	Metadata  map[string]string

	ConsumedAt     time.Time
	ConsumedReason string
	CanceledAt     time.Time
	CancelReason   string
	ExpiredAt      time.Time

	// PIN protection: PINHash is the HMAC of the PIN; wrong attempts count up
	// to MaxPINAttempts, and the write that reaches the limit stamps LockedAt.
	PINHash        []byte
	PINFailures    int
	MaxPINAttempts int
	LockedAt       time.Time

	// Payload is the sealed (encrypted) payload, never plaintext.
	Payload []byte

	// Writes made by each operation, so a retried request is recognised from
	// the old item alone: the Idempotency-Key and request fingerprint of the
	// call, and the request id of the attempt that committed.
	Create  Write
	Consume Write
	Cancel  Write
}

// Write identifies the request that performed one operation on an action.
type Write struct {
	Key         string // Idempotency-Key header, "" when none was sent
	Fingerprint string // SHA-256 of the canonical request body
	RequestID   string // API Gateway request id of the committing attempt
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
