package action

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Limits on request fields. They keep an item far below DynamoDB's 400 KB and
// an event far below EventBridge's 256 KB.
const (
	MaxIDLen          = 128
	MaxUserIDLen      = 256
	MaxKindLen        = 64
	MaxReasonLen      = 256
	MaxMetadataKeys   = 16
	MaxMetadataKeyLen = 64
	MaxMetadataValLen = 256
	MinPINLen         = 4
	MaxPINLen         = 32
	MaxPINAttempts    = 10
	MaxPayloadBytes   = 16 << 10
	MaxPayloadDepth   = 32
	MaxLifetime       = 366 * 24 * time.Hour
	DefaultLifetime   = 24 * time.Hour
)

// CreateRequest is the body of POST /actions.
type CreateRequest struct {
	ActionID       string            `json:"actionId,omitempty"`
	UserID         string            `json:"userId"`
	Kind           string            `json:"kind,omitempty"`
	ActiveAt       string            `json:"activeAt,omitempty"`
	ExpiresAt      string            `json:"expiresAt,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	PIN            string            `json:"pin,omitempty"`
	MaxPINAttempts *int              `json:"maxPinAttempts,omitempty"`
	// Payload is any JSON value, kept as its raw bytes; it is sealed before storage.
	Payload jsontext.Value `json:"payload,omitzero"`
	// Supersede cancels the user's earlier open actions of the same kind
	// once this one is written.
	Supersede bool `json:"supersede,omitempty"`
	// MaxUses (default 1: single-use) and Releasable make a multi-use action.
	MaxUses    *int `json:"maxUses,omitempty"`
	Releasable bool `json:"releasable,omitempty"`
}

// ErrExpiresAtPassed is the refusal of a create whose expiresAt is not in
// the future. A create retried with its Idempotency-Key after that instant
// is answered from the stored action instead (its 201 replays).
var ErrExpiresAtPassed = &InvalidError{Field: "expiresAt", Message: "must be in the future"}

// ErrDefaultExpiryPassed is ErrExpiresAtPassed when expiresAt was not given
// and the default (activeAt + 24h) has passed: activeAt is at fault.
var ErrDefaultExpiryPassed = &InvalidError{Field: "activeAt",
	Message: "must be less than 24 hours ago when expiresAt is not given (the default expiresAt is activeAt + 24h)"}

// TooLateToCreate reports whether err refused a create only because its
// expiry has passed (a keyed retry of it may still replay).
func TooLateToCreate(err error) bool {
	return err == ErrExpiresAtPassed || err == ErrDefaultExpiryPassed
}

// ConsumeRequest is the body of POST /actions/{actionId}/consume.
type ConsumeRequest struct {
	Reason string `json:"reason,omitempty"`
	PIN    string `json:"pin,omitempty"`
	// UseID names who takes a use of a multi-use action (required there,
	// refused on a single-use one).
	UseID string `json:"useId,omitempty"`
}

// CancelRequest is the body of POST /actions/{actionId}/cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// ValidateCreate checks r and returns the action it describes, created at now.
// ID is left empty when the caller did not choose one. Payload and PIN are
// checked here but sealed and hashed by the caller, which holds the keys.
func ValidateCreate(r *CreateRequest, now time.Time) (*Action, error) {
	now = Millis(now)
	if r.ActionID != "" {
		if err := ValidateID("actionId", r.ActionID); err != nil {
			return nil, err
		}
	}
	if err := ValidateUserID(r.UserID); err != nil {
		return nil, err
	}
	if r.Kind != "" {
		if err := token("kind", r.Kind, MaxKindLen, "/"); err != nil {
			return nil, err
		}
	}
	activeAt := now
	if r.ActiveAt != "" {
		t, err := parseTime("activeAt", r.ActiveAt)
		if err != nil {
			return nil, err
		}
		activeAt = t
	}
	expiresAt := activeAt.Add(DefaultLifetime)
	if r.ExpiresAt != "" {
		t, err := parseTime("expiresAt", r.ExpiresAt)
		if err != nil {
			return nil, err
		}
		expiresAt = t
	} else {
		// expiresAt is derived from activeAt: a bad one is activeAt's fault.
		switch {
		case !expiresAt.After(now):
			return nil, ErrDefaultExpiryPassed
		case expiresAt.Sub(now) > MaxLifetime:
			return nil, invalid("activeAt", "must be at most %d days away when expiresAt is not given (the default expiresAt is activeAt + 24h)", int((MaxLifetime-DefaultLifetime).Hours()/24))
		}
	}
	switch {
	case !expiresAt.After(now):
		return nil, ErrExpiresAtPassed
	case !expiresAt.After(activeAt):
		return nil, invalid("expiresAt", "must be after activeAt")
	case expiresAt.Sub(activeAt) > MaxLifetime || expiresAt.Sub(now) > MaxLifetime:
		return nil, invalid("expiresAt", "must be at most %d days away", int(MaxLifetime.Hours()/24))
	}
	if err := validateMetadata(r.Metadata); err != nil {
		return nil, err
	}
	a := &Action{
		ID: r.ActionID, UserID: r.UserID, Kind: r.Kind,
		ActiveAt: activeAt, ExpiresAt: expiresAt, CreatedAt: now,
		Metadata: r.Metadata,
	}
	if r.MaxPINAttempts != nil && r.PIN == "" {
		return nil, invalid("maxPinAttempts", "needs pin")
	}
	if r.PIN != "" {
		if err := validatePIN(r.PIN); err != nil {
			return nil, err
		}
		a.MaxPINAttempts = DefaultMaxPINAttempts
		if r.MaxPINAttempts != nil {
			if n := *r.MaxPINAttempts; n < 1 || n > MaxPINAttempts {
				return nil, invalid("maxPinAttempts", "must be 1 to %d", MaxPINAttempts)
			}
			a.MaxPINAttempts = *r.MaxPINAttempts
		}
	}
	if err := validateUses(r, a); err != nil {
		return nil, err
	}
	if r.Payload != nil {
		if err := ValidateJSON("payload", r.Payload, MaxPayloadBytes); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// ValidateConsume checks a consume request.
func ValidateConsume(r *ConsumeRequest) error {
	if err := validateUseID(r.UseID); err != nil {
		return err
	}
	if err := text("reason", r.Reason, MaxReasonLen); err != nil {
		return err
	}
	if r.PIN != "" {
		// A PIN create could not have stored never matches: refused before
		// anything is counted.
		return validatePIN(r.PIN)
	}
	return nil
}

// validatePIN checks a PIN as create stores it: MinPINLen to MaxPINLen
// printable characters (counted as characters, not bytes).
func validatePIN(pin string) error {
	if n := utf8.RuneCountInString(pin); n < MinPINLen || n > MaxPINLen || !printable(pin) {
		return invalid("pin", "must be %d to %d printable characters", MinPINLen, MaxPINLen)
	}
	return nil
}

// ValidateCancel checks a cancel request.
func ValidateCancel(r *CancelRequest) error {
	return text("reason", r.Reason, MaxReasonLen)
}

// ValidateID checks an action id (from a body or a path): 1 to 128 characters
// of [A-Za-z0-9._:-], not "." or "..".
func ValidateID(field, id string) error {
	if id == "" {
		return invalid(field, "is required")
	}
	return ValidatePathSegment(field, id, MaxIDLen, "")
}

// ValidateUserID checks a user id (from a body or a path): free text of 1
// to MaxUserIDLen characters, not "." or "..", and without '/', '?', '#'
// or '%'. It is a path segment of /users/{userId}/actions, and API
// Gateway's HTTP API decodes the path before routing: no URL can address
// such a user (an escaped '/' splits the segment, '?' and '#' cut the path,
// '%' is decoded twice), so its actions could be stored and never listed or
// canceled.
func ValidateUserID(id string) error {
	if id == "" {
		return invalid("userId", "is required")
	}
	if err := notDotSegment("userId", id); err != nil {
		return err
	}
	if strings.ContainsAny(id, UserIDUnreachable) {
		return invalid("userId", "must not contain /, ?, # or %% (no URL reaches such a user's actions: API Gateway decodes the path before routing)")
	}
	return text("userId", id, MaxUserIDLen)
}

// UserIDUnreachable are the characters a userId cannot hold (see
// ValidateUserID).
const UserIDUnreachable = "/?#%"

// ValidatePathSegment checks an identifier that is also a URL path segment:
// a token (see ValidateToken) other than "." and "..", which a URL cannot
// reach (clients and proxies resolve them away).
func ValidatePathSegment(field, s string, max int, extra string) error {
	if err := notDotSegment(field, s); err != nil {
		return err
	}
	return token(field, s, max, extra)
}

func notDotSegment(field, s string) error {
	if s == "." || s == ".." {
		return invalid(field, "must not be . or .. (a URL cannot address them)")
	}
	return nil
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns an unguessable action id: 160 random bits, 32 characters.
func NewID() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return idEncoding.EncodeToString(b)
}

// IDFromDigest turns a keyed digest (at least 20 bytes) into an action id in
// the same alphabet as NewID, for ids derived from an Idempotency-Key.
func IDFromDigest(sum []byte) string { return idEncoding.EncodeToString(sum[:20]) }

func validateMetadata(m map[string]string) error {
	if len(m) > MaxMetadataKeys {
		return invalid("metadata", "has more than %d entries", MaxMetadataKeys)
	}
	for k, v := range m {
		if err := token("metadata", k, MaxMetadataKeyLen, ""); err != nil {
			return invalid("metadata", "key %q must be 1 to %d characters of [A-Za-z0-9._:-]", truncate(k, 80), MaxMetadataKeyLen)
		}
		if err := text("metadata."+k, v, MaxMetadataValLen); err != nil {
			return err
		}
	}
	return nil
}

// ValidateJSON bounds a stored JSON value's size (maxBytes) and nesting
// depth (MaxPayloadDepth: a deeply nested value costs stack on every later
// decode). The payload of an action and the response of a key share it.
func ValidateJSON(field string, raw []byte, maxBytes int) error {
	if len(raw) > maxBytes {
		return invalid(field, "is larger than %d bytes", maxBytes)
	}
	depth, inString, escaped := 0, false, false
	for _, c := range raw {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			if depth++; depth > MaxPayloadDepth {
				return invalid(field, "is nested deeper than %d levels", MaxPayloadDepth)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

func parseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalid(field, "must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		return time.Time{}, invalid(field, "must have a UTC offset between -23:59 and +23:59")
	}
	return Millis(t), nil
}

// token checks an identifier-like string: [A-Za-z0-9._:-] plus extra.
func token(field, s string, max int, extra string) error {
	if len(s) == 0 || len(s) > max {
		return invalid(field, "must be 1 to %d characters", max)
	}
	for _, c := range s {
		ok := c < utf8.RuneSelf && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.ContainsRune("._:-"+extra, c))
		if !ok {
			return invalid(field, "may hold only [A-Za-z0-9._:%s-]", extra)
		}
	}
	return nil
}

// text checks free text: at most max characters, no control characters.
func text(field, s string, max int) error {
	if utf8.RuneCountInString(s) > max {
		return invalid(field, "must be at most %d characters", max)
	}
	if !printable(s) {
		return invalid(field, "must not contain control characters")
	}
	return nil
}

func printable(s string) bool {
	for _, c := range s {
		if c == utf8.RuneError || unicode.IsControl(c) {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// ValidateToken checks an identifier-like field: 1 to max characters of
// [A-Za-z0-9._:-] plus extra. Other request types share it.
func ValidateToken(field, s string, max int, extra string) error { return token(field, s, max, extra) }

// ValidateText checks free text: at most max characters, no control characters.
func ValidateText(field, s string, max int) error { return text(field, s, max) }
