package client

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/exactonce/exactonce/client/codes"
	"github.com/exactonce/exactonce/idempotency"
)

// Error is an answer other than success: the API's error code and message
// with the context it gives (the first consumedAt, attempts left, …).
// errors.Is(err, ErrAlreadyUsed) and friends match it by code.
type Error struct {
	Status            int        `json:"-"`
	Code              string     `json:"error"`
	Message           string     `json:"message"`
	Field             string     `json:"field,omitempty"`
	ConsumedAt        *time.Time `json:"consumedAt,omitempty"`
	CanceledAt        *time.Time `json:"canceledAt,omitempty"`
	ExpiresAt         *time.Time `json:"expiresAt,omitempty"`
	ActiveAt          *time.Time `json:"activeAt,omitempty"`
	LockedAt          *time.Time `json:"lockedAt,omitempty"`
	AttemptsRemaining *int       `json:"attemptsRemaining,omitempty"`
	LeaseExpiresAt    *time.Time `json:"leaseExpiresAt,omitempty"`
	CompletedAt       *time.Time `json:"completedAt,omitempty"`
	MaxUses           *int       `json:"maxUses,omitempty"` // no_uses_left
	RequestID         string     `json:"requestId,omitempty"`
	// RetryAfter is the server's Retry-After (503, 429, 409 in_progress).
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("exactonce: %d %s: %s (field %s)", e.Status, e.Code, e.Message, e.Field)
	}
	return fmt.Sprintf("exactonce: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool {
	s, ok := target.(*sentinel)
	return ok && s.matches(e.Code)
}

// sentinel is an error code to match with errors.Is.
type sentinel struct{ codes []codes.Code }

func is(c ...codes.Code) error { return &sentinel{c} }

func (s *sentinel) Error() string { return "exactonce: " + string(s.codes[0]) }

func (s *sentinel) matches(code string) bool {
	for _, c := range s.codes {
		if string(c) == code {
			return true
		}
	}
	return false
}

// Sentinels for errors.Is, one per error code of the API (declared in
// client/codes, and for idempotency keys in package idempotency).
// ErrForbidden is the service's forbidden (a caller no tenant takes); API
// Gateway's own 403 ({"message":"Forbidden"}: IAM denied the signer, or a
// JWT lacks the route's scope) has no API code, so it is an *Error with Code
// "http_403" that ErrForbidden does not match.
var (
	ErrInvalidRequest      = is(codes.InvalidRequest)
	ErrTooLarge            = is(codes.TooLarge)
	ErrNotFound            = is(codes.ActionNotFound, codes.Code(idempotency.CodeNotFound))
	ErrExists              = is(codes.ActionExists)
	ErrAlreadyUsed         = is(codes.AlreadyUsed)
	ErrCanceled            = is(codes.Canceled)
	ErrExpired             = is(codes.Expired)
	ErrNotActive           = is(codes.NotActive)
	ErrInvalidPIN          = is(codes.InvalidPIN)
	ErrPINRequired         = is(codes.PINRequired)
	ErrLocked              = is(codes.Locked)
	ErrKeyReused           = is(codes.KeyReused)
	ErrFingerprintMismatch = is(codes.Code(idempotency.CodeFingerprintMismatch))
	ErrInProgress          = is(codes.Code(idempotency.CodeInProgress))
	ErrLeaseLost           = is(codes.Code(idempotency.CodeLeaseLost))
	ErrKeyCompleted        = is(codes.Code(idempotency.CodeCompleted))
	ErrForbidden           = is(codes.Forbidden)
	ErrUnavailable         = is(codes.Unavailable)
	ErrNoUsesLeft          = is(codes.NoUsesLeft)
	ErrUseNotFound         = is(codes.UseNotFound)
	ErrNotReleasable       = is(codes.NotReleasable)
	ErrInternal            = is(codes.Internal)
)

// networkError is a request that got no answer (its effect is unknown).
type networkError struct{ err error }

func (e *networkError) Error() string { return "exactonce: no answer: " + e.err.Error() }
func (e *networkError) Unwrap() error { return e.err }

// decodeError builds the *Error of a non-2xx answer; a body that is not the
// API's error JSON (a gateway's own 5xx) keeps its status.
func decodeError(r *response) *Error {
	e := &Error{}
	if err := json.Unmarshal(r.body, e); err != nil || e.Code == "" {
		e = &Error{Code: fmt.Sprintf("http_%d", r.status), Message: string(truncate(r.body, 200))}
		if loc := r.header.Get("Location"); r.status >= 300 && r.status < 400 && loc != "" {
			e.Message = "redirect to " + string(truncate([]byte(loc), 200)) + " (not followed)"
		}
	}
	e.Status = r.status
	e.RetryAfter = retryAfter(r.header)
	return e
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
