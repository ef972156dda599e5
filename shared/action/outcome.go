package action

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/exactonce/exactonce/client/codes"
)

// Code names an outcome other than success: an error code of the HTTP API,
// declared in client/codes (subscribers and clients match on them there).
type Code = codes.Code

// Outcome codes.
const (
	CodeInvalidRequest = codes.InvalidRequest
	CodeTooLarge       = codes.TooLarge
	CodeNotFound       = codes.ActionNotFound
	CodeExists         = codes.ActionExists
	CodeAlreadyUsed    = codes.AlreadyUsed
	CodeCanceled       = codes.Canceled
	CodeExpired        = codes.Expired
	CodeNotActive      = codes.NotActive
	CodeLocked         = codes.Locked
	CodeInvalidPIN     = codes.InvalidPIN
	CodePINRequired    = codes.PINRequired
	CodeKeyReused      = codes.KeyReused
	CodeForbidden      = codes.Forbidden
	CodeUnavailable    = codes.Unavailable
	CodeInternal       = codes.Internal
)

// Rejection is the error an operation returns when the action's stored state
// refuses it. Action is the record as the refusing write saw it (never nil
// except for CodeNotFound), so callers can answer with its stable fields.
type Rejection struct {
	Code   Code
	Action *Action
}

func (r *Rejection) Error() string { return "action: " + string(r.Code) }

// Reject builds a Rejection.
func Reject(code Code, a *Action) *Rejection { return &Rejection{Code: code, Action: a} }

// InvalidError is a request that failed validation. Field is the JSON name of
// the field at fault ("" for the body as a whole).
type InvalidError struct {
	Field   string
	Message string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

func invalid(field, format string, args ...any) *InvalidError {
	return &InvalidError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Replay is returned by an operation whose request was already performed by
// the same logical call (same Idempotency-Key and body): Action is the record
// as that call left it, and the caller answers with the original response.
type Replay struct{ Action *Action }

func (r *Replay) Error() string { return "action: idempotent replay" }

// UnknownKeyError means a record names a key set (of its PIN hash, sealed
// payload or a stored fingerprint) that the keys at hand do not hold: an
// item written by a function that was rotated first, or a secret retired
// too early. Nothing may be judged or written against it; the caller
// reloads the secret and tries again, or answers 503.
type UnknownKeyError struct{ KeyID string }

func (e *UnknownKeyError) Error() string { return "action: record is under unknown key set " + e.KeyID }

// FingerprintKeyID is the key set a stored fingerprint ("kid:hex") was
// taken under ("" for one written before fingerprints were keyed).
func FingerprintKeyID(fp string) string {
	if i := strings.IndexByte(fp, ':'); i > 0 {
		return fp[:i]
	}
	return ""
}

// Comparable reports an *UnknownKeyError when the stored fingerprint is
// under a key set none of the request's fingerprints is: the two cannot be
// compared, so nothing may be judged against the stored one.
func Comparable(stored string, fps []string) error {
	kid := FingerprintKeyID(stored)
	if kid == "" || len(fps) == 0 {
		return nil
	}
	for _, f := range fps {
		if FingerprintKeyID(f) == kid {
			return nil
		}
	}
	return &UnknownKeyError{KeyID: kid}
}

// idempotency compares a retried request with the write that performed an
// operation. It reports whether this request is that call (replay), whether
// it reuses the call's key with another body (reused), or neither. A request
// id alone proves nothing: it replays only with the same body. A stored
// fingerprint under a key set the request cannot fingerprint with is an
// *UnknownKeyError, never a reuse.
func idempotency(w Write, at Attempt) (replay, reused bool, err error) {
	same := w.Fingerprint != "" && slices.Contains(at.Fingerprints, w.Fingerprint)
	sameReq := at.RequestID != "" && w.RequestID == at.RequestID
	sameKey := at.Key != "" && w.Key == at.Key
	if !same && (sameReq || sameKey) {
		if err := Comparable(w.Fingerprint, at.Fingerprints); err != nil {
			return false, false, err
		}
	}
	if sameReq && same {
		return true, false, nil // our own attempt committed; the SDK retried it
	}
	if !sameKey {
		return false, false, nil
	}
	return same, !same, nil
}

// Attempt describes one request to change an action, as classification needs it.
type Attempt struct {
	Now time.Time
	Key string // keyed digest of the Idempotency-Key, "" when absent
	// Fingerprints is the request's fingerprint under every known key set:
	// a stored fingerprint matches when it is one of them.
	Fingerprints []string
	RequestID    string
	PINPresented bool   // the consume carried a PIN
	UseID        string // the useId of a take or release of a multi-use action
}

// ClassifyConsume explains why a consume's conditional write failed, from the
// item the write saw (nil when there was none). Precedence: not found,
// a multi-use action (a 400: the consume must name its useId), already used, canceled, expired, not active, locked, PIN required.
// A *Replay means the consume was this call's own and must be answered as
// success. On a PIN-protected action whose guesses are used up no replay is
// given: a replay compares the request, PIN included, with the one that
// consumed, so it is a guess too.
func ClassifyConsume(old *Action, at Attempt) error {
	if old == nil {
		return Reject(CodeNotFound, nil)
	}
	if old.MultiUse() {
		return errUseIDRequired
	}
	if !old.ConsumedAt.IsZero() {
		switch replay, reused, err := idempotency(old.Consume, at); {
		case err != nil:
			return err
		case replay && old.Locked():
			return Reject(CodeLocked, old)
		case replay:
			return &Replay{Action: old}
		case reused:
			return Reject(CodeKeyReused, old)
		}
		return Reject(CodeAlreadyUsed, old)
	}
	if err := Closed(old, at.Now); err != nil {
		return err
	}
	if old.Locked() {
		return Reject(CodeLocked, old)
	}
	if old.PINProtected() && !at.PINPresented {
		return Reject(CodePINRequired, old)
	}
	// Every state condition held for this item: the caller decides (a PIN
	// consume on an action without PIN, a key the server must learn); for a
	// plain consume it is a bug, not an outcome.
	return Reject(CodeInternal, old)
}

// ClassifyCancel explains why a cancel's conditional write failed. A second
// cancel is not a failure: it answers with the first cancellation (*Replay),
// unless it reuses the first call's key with another body.
func ClassifyCancel(old *Action, at Attempt) error {
	if old == nil {
		return Reject(CodeNotFound, nil)
	}
	if !old.ConsumedAt.IsZero() {
		return Reject(CodeAlreadyUsed, old)
	}
	if !old.CanceledAt.IsZero() {
		switch _, reused, err := idempotency(old.Cancel, at); {
		case err != nil:
			return err
		case reused:
			return Reject(CodeKeyReused, old)
		}
		return &Replay{Action: old}
	}
	if !old.ExpiredAt.IsZero() || !at.Now.Before(old.ExpiresAt) {
		return Reject(CodeExpired, old)
	}
	return Reject(CodeInternal, old)
}

// ClassifyCreate explains why a create's conditional write (the item must not
// exist) failed: a retry of the same call replays, the same key with another
// body is key reuse, anything else is an existing action. Like a consume
// replay, a create replay of a PIN-protected action compares a body that
// holds the PIN, so it is refused once the guesses are used up.
func ClassifyCreate(old *Action, at Attempt) error {
	if old == nil {
		return Reject(CodeInternal, nil)
	}
	switch replay, reused, err := idempotency(old.Create, at); {
	case err != nil:
		return err
	case replay && old.Locked():
		return Reject(CodeLocked, old)
	case replay:
		return &Replay{Action: old}
	case reused:
		return Reject(CodeKeyReused, old)
	}
	return Reject(CodeExists, old)
}

// IsGuess reports whether a refusal compared the request with a stored
// body that holds the PIN (a reused key on a PIN-protected action): such a
// refusal spends one of the action's PIN guesses.
func IsGuess(err error) bool {
	r, ok := err.(*Rejection)
	return ok && r.Code == CodeKeyReused && r.Action != nil && r.Action.PINProtected()
}

// IsReplayOf reports whether the request is a re-send of the call that
// performed w (the same key and body), i.e. whether a replayed answer
// should carry Idempotent-Replayed. An SDK retry of the request's own
// write (the same request id) is not: its caller sent it once.
func IsReplayOf(w Write, key string, fingerprints []string) bool {
	return key != "" && w.Key == key && slices.Contains(fingerprints, w.Fingerprint)
}
