// Package codes declares the error codes of the ExactOnce HTTP API: the
// "error" value of every answer other than success, which the service
// answers with and clients match (client.ErrAlreadyUsed and friends). The
// idempotency-key codes (key_not_found, fingerprint_mismatch, in_progress,
// lease_lost, key_completed) are the idempotency library's, beside the rules
// that produce them (idempotency.Code). It imports nothing, so the service's
// domain packages use it too.
package codes

// Code is an error code of the API.
type Code string

// Error codes.
const (
	InvalidRequest Code = "invalid_request"
	TooLarge       Code = "request_too_large"
	ActionNotFound Code = "action_not_found"
	ActionExists   Code = "action_exists"
	AlreadyUsed    Code = "already_used"
	Canceled       Code = "canceled"
	Expired        Code = "expired"
	NotActive      Code = "not_active"
	Locked         Code = "locked"
	InvalidPIN     Code = "invalid_pin"
	PINRequired    Code = "pin_required"
	KeyReused      Code = "idempotency_key_reused"
	NoUsesLeft     Code = "no_uses_left"
	UseNotFound    Code = "use_not_found"
	NotReleasable  Code = "not_releasable"
	Forbidden      Code = "forbidden"
	Unavailable    Code = "unavailable"
	Internal       Code = "internal"
)
