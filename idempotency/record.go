package idempotency

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// The key lifecycle: a caller claims a key for one side effect, gets a
// lease and a fencing token, then completes the key with the response to
// replay or releases it to be retried. A Persistence performs each
// transition as one conditional write; the Classify functions explain a
// refused write from the record it returned. The same rules serve every
// Persistence: dynamostore.Table, the ExactOnce service's /keys routes (the
// hosted keys) and client.KeyStore, events/once.

// Limits and defaults. Besides its name and response, a record carries
// nothing longer than these (in characters, so at most 4 bytes each): a
// fingerprint and each claim field (Claim.Validate), and a last error
// (FitError), so whatever response a store accepts always fits its item.
const (
	MaxNameLen        = 255
	MaxFingerprintLen = 256
	MaxErrorLen       = 1024
	// DefaultRetention is how long a record is kept after its last
	// transition: within it a completed key replays.
	DefaultRetention = 24 * time.Hour
	// The hosted keys (the /keys routes) take a lease of at most
	// MaxHostedLease and a response of at most MaxHostedResponseBytes.
	MaxHostedLease         = time.Hour
	MaxHostedResponseBytes = 64 << 10
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

// Record is one idempotency key's record, as a Persistence returns it.
type Record struct {
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
	// ReleasedToken is the token of the latest release, kept through later
	// claims and completes until the key's retention ends, so a release
	// re-sent after its answer was lost answers the same (a replay) even
	// once another caller has taken the key.
	ReleasedToken string
	// Claim identifies the request that took the current lease, so a retried
	// claim gets its own lease back rather than a refusal (hosted keys only).
	Claim Request
	// ExpiresAt is the end of the key's retention; after it the key is gone.
	ExpiresAt time.Time
}

// StateAt is the key's state at now.
func (k *Record) StateAt(now time.Time) State {
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
func (k *Record) Gone(now time.Time) bool { return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) }

// Code names a refused key operation; the strings are the hosted keys API's
// "error" values.
type Code string

// Refusal codes.
const (
	CodeNotFound            Code = "key_not_found"
	CodeFingerprintMismatch Code = "fingerprint_mismatch"
	CodeInProgress          Code = "in_progress"
	CodeLeaseLost           Code = "lease_lost"
	CodeCompleted           Code = "key_completed"
)

// Rejection is a refused operation with the key as the refusing write saw
// it (nil for CodeNotFound).
type Rejection struct {
	Code Code
	Key  *Record
}

func (r *Rejection) Error() string { return "idempotency: " + string(r.Code) }

// Replay means the operation had already been done (by this caller's
// earlier attempt, or a completed key answering a claim): answer with Key.
type Replay struct{ Key *Record }

func (r *Replay) Error() string { return "idempotency: replay" }

// unexplained is a refused write that no rule explains: a store bug or an
// item of another shape. It is neither a Rejection nor a Replay.
type unexplained struct{ op string }

func (e *unexplained) Error() string {
	return "idempotency: the " + e.op + " was refused for no reason the key's record shows"
}

func reject(c Code, k *Record) *Rejection { return &Rejection{Code: c, Key: k} }

// NewToken returns a fresh fencing token: 128 random bits in hex.
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Request identifies the HTTP request that made a claim on the hosted keys:
// its Idempotency-Key and body fingerprints (keyed digests) and its API
// Gateway request id. The library's own claims leave it empty.
type Request struct {
	Key         string
	Fingerprint string
	RequestID   string
}

// Claim is one request to claim a key: what the store writes and what
// classification of a refusal needs. Every claimant (Run, the /keys
// routes, events/once) fills the same struct.
type Claim struct {
	Now         time.Time
	Fingerprint string        // the caller's fingerprint of its side effect's parameters
	Lease       time.Duration // how long the holder keeps the key without finishing
	// Token is the fresh fencing token this claim writes (NewToken). Finding
	// it on the key means the write was this claim's own, applied although
	// its answer was lost (an SDK retry): the claim holds the key.
	Token   string
	Request Request // the claim request (hosted keys only)
	// Fingerprints is the claim request body's fingerprint under every known key set (hosted keys only).
	Fingerprints []string
	// SameFingerprints are other stored forms of Fingerprint that a key may
	// hold and that match it (hosted keys only: the same fingerprint keyed
	// under an earlier key set, or as stored before fingerprints were
	// keyed). A claim stores Fingerprint.
	SameFingerprints []string
	// AnyAfterRelease lets this claim take a key its holder released whatever
	// the key's fingerprint (a released attempt has no response to protect):
	// Run's retries after a failure. The /keys routes leave it off, so
	// another fingerprint is refused in every state there.
	AnyAfterRelease bool
}

// Validate checks what a claim stores beside the key's name: the
// fingerprint and the claim request's fields, each at most
// MaxFingerprintLen characters. A store refuses a claim that fails it
// before writing, so the effect never runs under a key whose item could not
// also hold its response. The error names the field.
func (c *Claim) Validate() error {
	fields := []struct{ field, v string }{
		{"fingerprint", c.Fingerprint},
		{"claimKey", c.Request.Key},
		{"claimFingerprint", c.Request.Fingerprint},
		{"claimRequestId", c.Request.RequestID},
	}
	for _, fp := range c.SameFingerprints {
		fields = append(fields, struct{ field, v string }{"fingerprint", fp})
	}
	for _, f := range fields {
		if utf8.RuneCountInString(f.v) > MaxFingerprintLen {
			return fmt.Errorf("%s: must be at most %d characters", f.field, MaxFingerprintLen)
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

// SameFingerprint reports whether a key's stored fingerprint is this
// claim's: Fingerprint or one of SameFingerprints.
func (c *Claim) SameFingerprint(stored string) bool {
	return stored == c.Fingerprint || slices.Contains(c.SameFingerprints, stored)
}

// ClassifyClaim explains a refused claim from the key the write saw.
// Precedence: a reused key with other parameters is always a mismatch,
// whatever the state (the payload is validated on the record the failed
// write returned, never skipped); a completed key replays its response; this
// caller's own earlier claim gets its lease back; anything else is held by
// another caller.
func ClassifyClaim(old *Record, at Claim) error {
	if old == nil {
		return &unexplained{"claim"} // the write creates missing keys
	}
	if !at.SameFingerprint(old.Fingerprint) {
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
	return &unexplained{"claim"}
}

// sameCall reports whether the claim that holds the lease (held) and this
// attempt are the same request: the same API request id (an SDK retry) or
// the same Idempotency-Key, and in either case the same request body. Only
// that retry gets the holder's token back; another body under the same key
// (say, another leaseSeconds) is another caller.
func sameCall(held Request, at Claim) bool {
	sameBody := held.Fingerprint != "" && slices.Contains(at.Fingerprints, held.Fingerprint)
	return sameBody && (at.Request.RequestID != "" && held.RequestID == at.Request.RequestID || at.Request.Key != "" && held.Key == at.Request.Key)
}

// ClassifyComplete explains a refused complete (or hold): the same token
// completing again replays; otherwise the token no longer holds the key.
func ClassifyComplete(old *Record, token string) error {
	switch {
	case old == nil:
		return reject(CodeNotFound, nil)
	case !old.CompletedAt.IsZero() && old.Token == token:
		return &Replay{Key: old}
	case old.Token != token:
		return reject(CodeLeaseLost, old)
	}
	return &unexplained{"complete"}
}

// ClassifyRelease explains a refused release: the token of the latest
// release releasing again replays (its answer was lost), with the key as it
// is now: perhaps claimed, or completed, by another caller since; a
// completed key cannot be released; otherwise the lease is lost.
func ClassifyRelease(old *Record, token string) error {
	switch {
	case old == nil:
		return reject(CodeNotFound, nil)
	case token != "" && old.ReleasedToken == token:
		return &Replay{Key: old}
	case !old.CompletedAt.IsZero():
		return reject(CodeCompleted, old)
	case old.Token != token:
		return reject(CodeLeaseLost, old)
	}
	return &unexplained{"release"}
}

// validName reports whether name is a key name every store takes (the
// hosted keys' path segment): 1 to MaxNameLen characters of
// [A-Za-z0-9._:~-], not "." or "..".
func validName(name string) bool {
	if name == "" || len(name) > MaxNameLen || name == "." || name == ".." {
		return false
	}
	return strings.IndexFunc(name, func(r rune) bool { return !nameChar(r) }) < 0
}

func nameChar(r rune) bool {
	return r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:~-", r))
}
