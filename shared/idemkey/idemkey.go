// Package idemkey is the idempotency-key lifecycle offered as a service
// (seeds 001–004): a caller claims a key for one side effect of its own,
// gets a lease and a fencing token, then completes the key with the
// response to replay or releases it to be retried. Like the action rules it
// imports no AWS package: the store performs each transition as one
// conditional write and this package explains a refused write.
package idemkey

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/exactonce/exactonce/shared/action"
)

// Limits and defaults. Besides its name and response, a key item carries
// nothing longer than these (in characters, so at most 4 bytes each): a
// fingerprint and each claim field (Claim.Validate), and a last error
// (FitError), so whatever response a store accepts always fits its item.
const (
	MaxNameLen          = 255
	MaxFingerprintLen   = 256
	MaxErrorLen         = 1024
	MaxResponseBytes    = 64 << 10
	DefaultLeaseSeconds = 60
	MaxLeaseSeconds     = 3600
	DefaultRetention    = 24 * time.Hour
)

// State is a key's public state.
type State string

// States. A key in StateFailed or StateLeaseExpired can be claimed again.
const (
	StateInProgress   State = "in_progress"   // a holder's lease runs
	StateCompleted    State = "completed"     // the response is stored and replayed
	StateFailed       State = "failed"        // the holder released it
	StateLeaseExpired State = "lease_expired" // the holder's lease lapsed without an answer
)

// Key is one idempotency key's record.
type Key struct {
	Name        string
	Fingerprint string
	// Token is the current holder's fencing token ("" after a release).
	Token          string
	LeaseExpiresAt time.Time
	CreatedAt      time.Time
	ClaimedAt      time.Time
	CompletedAt    time.Time
	ReleasedAt     time.Time
	// Response is the JSON stored by complete, replayed to later claims.
	Response jsontext.Value
	Attempts int // claims granted
	Failures int // releases
	// LastError is the error text of the latest release.
	LastError string
	// ReleasedToken is the token of the latest release, so a retried
	// release answers the same.
	ReleasedToken string
	// Claim identifies the request that took the current lease, so a retried
	// claim gets its own lease back rather than 409.
	Claim action.Write
	// ExpiresAt is the end of the key's retention; after it the key is gone.
	ExpiresAt time.Time
}

// StateAt is the key's state at now.
func (k *Key) StateAt(now time.Time) State {
	switch {
	case !k.CompletedAt.IsZero():
		return StateCompleted
	case k.Token == "":
		return StateFailed
	case now.Before(k.LeaseExpiresAt):
		return StateInProgress
	}
	return StateLeaseExpired
}

// Gone reports whether the key's retention ended by now (DynamoDB TTL may
// not have deleted it yet); a gone key reads as absent and is claimable anew.
func (k *Key) Gone(now time.Time) bool { return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) }

// Code names a refused key operation; the strings are the HTTP API's
// "error" values.
type Code string

// Refusal codes.
const (
	CodeNotFound            Code = "key_not_found"
	CodeFingerprintMismatch Code = "fingerprint_mismatch"
	CodeInProgress          Code = "in_progress"
	CodeLeaseLost           Code = "lease_lost"
	CodeCompleted           Code = "key_completed"
	CodeInternal            Code = "internal"
)

// Rejection is a refused operation with the key as the refusing write saw
// it (nil for CodeNotFound).
type Rejection struct {
	Code Code
	Key  *Key
}

func (r *Rejection) Error() string { return "idemkey: " + string(r.Code) }

// Replay means the operation had already been done (by this caller's
// earlier attempt, or a completed key answering a claim): answer with Key.
type Replay struct{ Key *Key }

func (r *Replay) Error() string { return "idemkey: replay" }

func reject(c Code, k *Key) *Rejection { return &Rejection{Code: c, Key: k} }

// NewToken returns a fresh fencing token: 128 random bits in hex.
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Claim is one request to claim a key: what the store writes and what
// classification of a refusal needs. Every claimant (the /keys routes, the
// idempotency library, events/once) fills the same struct.
type Claim struct {
	Now         time.Time
	Fingerprint string        // the caller's fingerprint of its side effect's parameters
	Lease       time.Duration // how long the holder keeps the key without finishing
	// Token is the fresh fencing token this claim writes (NewToken). Finding
	// it on the key means the write was this claim's own, applied although
	// its answer was lost (an SDK retry): the claim holds the key.
	Token string
	Write action.Write // the claim request's Idempotency-Key, body fingerprint and request id (HTTP only)
	// Fingerprints is the claim request body's fingerprint under every known key set (HTTP only).
	Fingerprints []string
	// AnyAfterRelease lets this claim take a key its holder released whatever
	// the key's fingerprint (a released attempt has no response to protect):
	// the idempotency library's retries after a failure. The /keys routes
	// leave it off, so another fingerprint is refused in every state there.
	AnyAfterRelease bool
}

// Validate checks what a claim stores beside the key's name: the
// fingerprint and the claim request's fields, each at most
// MaxFingerprintLen characters. A store refuses a claim that fails it
// before writing, so the effect never runs under a key whose item could not
// also hold its response.
func (c *Claim) Validate() error {
	for _, f := range []struct{ field, v string }{
		{"fingerprint", c.Fingerprint},
		{"claimKey", c.Write.Key},
		{"claimFingerprint", c.Write.Fingerprint},
		{"claimRequestId", c.Write.RequestID},
	} {
		if utf8.RuneCountInString(f.v) > MaxFingerprintLen {
			return &action.InvalidError{Field: f.field, Message: "must be at most 256 characters"}
		}
	}
	return nil
}

// FitError fits a failure's text to what a key keeps as its last error:
// printable (control characters and bytes that are not UTF-8 become
// spaces) and at most MaxErrorLen characters, cut where longer. A release
// or hold stores only this, and a later claim keeps it, so the item keeps
// room for the response; the hosted keys API refuses anything else.
func FitError(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) <= MaxErrorLen {
		return s
	}
	n := 0
	for i := range s {
		if n == MaxErrorLen {
			return s[:i]
		}
		n++
	}
	return s
}

// ClassifyClaim explains a refused claim from the key the write saw.
// Precedence: a reused key with other parameters is always a mismatch,
// whatever the state (the payload is validated on the record the failed
// write returned, never skipped); a completed key replays its response; this
// caller's own earlier claim gets its lease back; anything else is held by
// another caller.
func ClassifyClaim(old *Key, at Claim) error {
	if old == nil {
		return reject(CodeInternal, nil) // the write creates missing keys
	}
	if old.Fingerprint != at.Fingerprint {
		return reject(CodeFingerprintMismatch, old)
	}
	if !old.CompletedAt.IsZero() {
		return &Replay{Key: old}
	}
	if old.StateAt(at.Now) == StateInProgress && (at.Token != "" && old.Token == at.Token || sameCall(old.Claim, at)) {
		return &Replay{Key: old}
	}
	if old.StateAt(at.Now) == StateInProgress {
		return reject(CodeInProgress, old)
	}
	return reject(CodeInternal, old)
}

// sameCall reports whether the claim that holds the lease (w) and this
// attempt are the same request: the same API request id (an SDK retry) or
// the same Idempotency-Key, and in either case the same request body. Only
// that retry gets the holder's token back; another body under the same key
// (say, another leaseSeconds) is another caller.
func sameCall(w action.Write, at Claim) bool {
	sameBody := w.Fingerprint != "" && slices.Contains(at.Fingerprints, w.Fingerprint)
	return sameBody && (at.Write.RequestID != "" && w.RequestID == at.Write.RequestID || at.Write.Key != "" && w.Key == at.Write.Key)
}

// ClassifyComplete explains a refused complete: the same token completing
// again replays; otherwise the token no longer holds the key.
func ClassifyComplete(old *Key, token string) error {
	switch {
	case old == nil:
		return reject(CodeNotFound, nil)
	case !old.CompletedAt.IsZero() && old.Token == token:
		return &Replay{Key: old}
	case old.Token != token:
		return reject(CodeLeaseLost, old)
	}
	return reject(CodeInternal, old)
}

// ClassifyRelease explains a refused release: the same token releasing again
// replays; a completed key cannot be released; otherwise the lease is lost.
func ClassifyRelease(old *Key, token string) error {
	switch {
	case old == nil:
		return reject(CodeNotFound, nil)
	case !old.CompletedAt.IsZero():
		return reject(CodeCompleted, old)
	case old.Token == "" && old.ReleasedToken == token:
		return &Replay{Key: old}
	case old.Token != token:
		return reject(CodeLeaseLost, old)
	}
	return reject(CodeInternal, old)
}

// ClaimRequest is the body of POST /keys/{key}/claim.
type ClaimRequest struct {
	Fingerprint  string `json:"fingerprint"`
	LeaseSeconds *int   `json:"leaseSeconds,omitempty"`
}

// CompleteRequest is the body of POST /keys/{key}/complete.
type CompleteRequest struct {
	Token    string         `json:"token"`
	Response jsontext.Value `json:"response"`
}

// ReleaseRequest is the body of POST /keys/{key}/release.
type ReleaseRequest struct {
	Token string `json:"token"`
	Error string `json:"error,omitempty"`
}

// ValidateName checks a key name (a path segment): 1 to 255 characters of
// [A-Za-z0-9._:~-]. Callers with other keys send a hash of them.
func ValidateName(name string) error {
	return action.ValidatePathSegment("key", name, MaxNameLen, "~")
}

// ValidateClaim checks a claim and returns its lease.
func ValidateClaim(r *ClaimRequest) (time.Duration, error) {
	if r.Fingerprint == "" {
		return 0, &action.InvalidError{Field: "fingerprint", Message: "is required"}
	}
	if err := action.ValidateText("fingerprint", r.Fingerprint, MaxFingerprintLen); err != nil {
		return 0, err
	}
	lease := DefaultLeaseSeconds
	if r.LeaseSeconds != nil {
		lease = *r.LeaseSeconds
		if lease < 1 || lease > MaxLeaseSeconds {
			return 0, &action.InvalidError{Field: "leaseSeconds", Message: "must be 1 to 3600"}
		}
	}
	return time.Duration(lease) * time.Second, nil
}

// ValidateComplete checks a complete request.
func ValidateComplete(r *CompleteRequest) error {
	if err := validateToken(r.Token); err != nil {
		return err
	}
	if len(r.Response) == 0 {
		return &action.InvalidError{Field: "response", Message: "is required (any JSON value)"}
	}
	return action.ValidateJSON("response", r.Response, MaxResponseBytes)
}

// ValidateRelease checks a release request.
func ValidateRelease(r *ReleaseRequest) error {
	if err := validateToken(r.Token); err != nil {
		return err
	}
	return action.ValidateText("error", r.Error, MaxErrorLen)
}

func validateToken(t string) error {
	if t == "" {
		return &action.InvalidError{Field: "token", Message: "is required"}
	}
	if len(t) != 32 {
		return &action.InvalidError{Field: "token", Message: "must be the token a claim returned"}
	}
	if _, err := hex.DecodeString(t); err != nil {
		return &action.InvalidError{Field: "token", Message: "must be the token a claim returned"}
	}
	return nil
}
