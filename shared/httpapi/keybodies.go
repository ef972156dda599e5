package httpapi

// The request bodies of the hosted keys API (the /keys routes) and their
// validation. The key lifecycle these requests drive (the record, its
// states, the classification of a refused write) is the idempotency
// library's.

import (
	"encoding/hex"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/shared/action"
)

// keyClaimRequest is the body of POST /keys/{key}/claim.
type keyClaimRequest struct {
	Fingerprint  string `json:"fingerprint"`
	LeaseSeconds *int   `json:"leaseSeconds,omitempty"`
}

// keyCompleteRequest is the body of POST /keys/{key}/complete.
type keyCompleteRequest struct {
	Token    string         `json:"token"`
	Response jsontext.Value `json:"response"`
}

// keyReleaseRequest is the body of POST /keys/{key}/release.
type keyReleaseRequest struct {
	Token string `json:"token"`
	Error string `json:"error,omitempty"`
}

// validateKeyName checks a key name (a path segment): 1 to 255 characters of
// [A-Za-z0-9._:~-]. Callers with other keys send a hash of them.
func validateKeyName(name string) error {
	return action.ValidatePathSegment("key", name, idempotency.MaxNameLen, "~")
}

// validateKeyClaim checks a claim and returns its lease (idempotency.DefaultLease
// when the request names none).
func validateKeyClaim(r *keyClaimRequest) (time.Duration, error) {
	if r.Fingerprint == "" {
		return 0, &action.InvalidError{Field: "fingerprint", Message: "is required"}
	}
	if err := action.ValidateText("fingerprint", r.Fingerprint, idempotency.MaxFingerprintLen); err != nil {
		return 0, err
	}
	if r.LeaseSeconds == nil {
		return idempotency.DefaultLease, nil
	}
	if s := *r.LeaseSeconds; s < 1 || s > int(idempotency.MaxHostedLease/time.Second) {
		return 0, &action.InvalidError{Field: "leaseSeconds", Message: "must be 1 to 3600"}
	}
	return time.Duration(*r.LeaseSeconds) * time.Second, nil
}

// validateKeyComplete checks a complete request.
func validateKeyComplete(r *keyCompleteRequest) error {
	if err := validateKeyToken(r.Token); err != nil {
		return err
	}
	if len(r.Response) == 0 {
		return &action.InvalidError{Field: "response", Message: "is required (any JSON value)"}
	}
	return action.ValidateJSON("response", r.Response, idempotency.MaxHostedResponseBytes)
}

// validateKeyRelease checks a release request.
func validateKeyRelease(r *keyReleaseRequest) error {
	if err := validateKeyToken(r.Token); err != nil {
		return err
	}
	return action.ValidateText("error", r.Error, idempotency.MaxErrorLen)
}

func validateKeyToken(t string) error {
	if t == "" {
		return &action.InvalidError{Field: "token", Message: "is required"}
	}
	if len(t) != 32 {
		return &action.InvalidError{Field: "token", Message: "must be the token a claim returned"}
	}
	// Lower-case hex, as a claim returns it (the Token schema): another
	// spelling of it is no token the key holds.
	if _, err := hex.DecodeString(t); err != nil || strings.ToLower(t) != t {
		return &action.InvalidError{Field: "token", Message: "must be the token a claim returned"}
	}
	return nil
}
