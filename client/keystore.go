package client

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/exactonce/exactonce/idempotency"
)

// KeyStore keeps idempotency keys in the hosted ExactOnce keys API: the
// idempotency library's Persistence for a service without access to a
// table of its own. Each method is one call (one conditional write on the
// service's table), retried safely under one Idempotency-Key.
//
//	h := idempotency.Wrap(fn, idempotency.Options[In, Out]{Store: c.KeyStore(), Key: …})
type KeyStore struct{ c *Client }

// KeyStore returns the hosted keys as an idempotency.Persistence.
func (c *Client) KeyStore() *KeyStore { return &KeyStore{c: c} }

var _ idempotency.Persistence = (*KeyStore)(nil)

// Claim claims key (POST /keys/{key}/claim). The service mints the token;
// the lease is whole seconds from 1 to 3600. A key another caller holds is
// a refusal in_progress whose record's LeaseExpiresAt is cl.Now plus the
// server's Retry-After (so the wait does not depend on the two clocks
// agreeing; see inProgressWait for an answer without one).
func (s *KeyStore) Claim(ctx context.Context, key string, cl idempotency.Claim) (*idempotency.Record, error) {
	lease := min(max(cl.Lease, time.Second), idempotency.MaxHostedLease)
	k, err := s.c.Claim(ctx, key, cl.Fingerprint, lease)
	var e *Error
	switch {
	case errors.As(err, &e) && e.Code == string(idempotency.CodeInProgress):
		until := cl.Now.Add(inProgressWait(e, cl.Now, lease))
		return nil, &refusal{&idempotency.Rejection{Code: idempotency.CodeInProgress, Key: &idempotency.Record{Name: key, LeaseExpiresAt: until}}, err}
	case errors.As(err, &e) && e.Code == string(idempotency.CodeFingerprintMismatch):
		return nil, &refusal{&idempotency.Rejection{Code: idempotency.CodeFingerprintMismatch}, err}
	case err != nil:
		return nil, err
	case k.State == string(idempotency.StateCompleted):
		// The service compared the fingerprint before answering.
		return nil, &idempotency.Replay{Key: record(k, cl.Fingerprint)}
	}
	return record(k, cl.Fingerprint), nil
}

// inProgressWait is how long to wait before claiming a key another caller
// holds again: the server's Retry-After, which counts on the server's clock
// alone. Without it, the answer's leaseExpiresAt less the local clock, which
// a skewed clock makes wrong either way (a clock ahead: 0 and a claim loop,
// a billed write each; behind: a wait past the lease), so it is bounded to
// between 1 s (the service's least Retry-After) and lease, the lease this
// caller asked for (at most MaxHostedLease): waiting one lease of its own
// costs one claim per lease at worst.
func inProgressWait(e *Error, now time.Time, lease time.Duration) time.Duration {
	switch {
	case e.RetryAfter > 0:
		return e.RetryAfter
	case e.LeaseExpiresAt != nil:
		return min(max(e.LeaseExpiresAt.Sub(now), time.Second), max(lease, time.Second))
	}
	return time.Second
}

// Complete stores the response (POST /keys/{key}/complete).
func (s *KeyStore) Complete(ctx context.Context, key, token string, response []byte, _ time.Time) (*idempotency.Record, error) {
	k, err := s.c.Complete(ctx, key, token, json.RawMessage(response))
	if err != nil {
		return nil, rejection(err)
	}
	return record(k, ""), nil
}

// Release gives the key up (POST /keys/{key}/release).
func (s *KeyStore) Release(ctx context.Context, key, token, reason string, _ time.Time) (*idempotency.Record, error) {
	k, err := s.c.Release(ctx, key, token, cleanReason(reason))
	if err != nil {
		return nil, rejection(err)
	}
	return record(k, ""), nil
}

// MaxResponseBytes is the largest response the hosted keys store
// (idempotency.MaxHostedResponseBytes). The library does not release a key
// whose response is larger (idempotency.ErrResponseTooLarge), but the hosted
// keys have no way to hold a key past its lease (KeyStore is not an
// idempotency.Holder): the key stays in progress only until its lease ends,
// and then the next claim is granted and runs the function again.
func (s *KeyStore) MaxResponseBytes() int { return idempotency.MaxHostedResponseBytes }

// rejection adds the domain's refusal to a holder's refused call.
func rejection(err error) error {
	var e *Error
	if errors.As(err, &e) {
		switch c := idempotency.Code(e.Code); c {
		case idempotency.CodeLeaseLost, idempotency.CodeCompleted, idempotency.CodeNotFound:
			return &refusal{&idempotency.Rejection{Code: c}, err}
		}
	}
	return err
}

// refusal is an answer of the API that is also a refusal the library
// understands: errors.Is and errors.As find both, and its text is the API's
// alone, on one line (errors.Join would put a line break in what is logged).
type refusal struct {
	domain *idempotency.Rejection
	api    error
}

func (r *refusal) Error() string   { return r.api.Error() }
func (r *refusal) Unwrap() []error { return []error{r.domain, r.api} }

// record is the library's view of an answered key.
func record(k *Key, fingerprint string) *idempotency.Record {
	r := &idempotency.Record{
		Name: k.Key, Fingerprint: fingerprint, Token: k.Token, Response: []byte(k.Response),
		CreatedAt: k.CreatedAt, Attempts: k.Attempts, Failures: k.Failures, LastError: k.LastError,
	}
	for dst, src := range map[*time.Time]*time.Time{&r.LeaseExpiresAt: k.LeaseExpiresAt, &r.ClaimedAt: k.ClaimedAt, &r.CompletedAt: k.CompletedAt, &r.ReleasedAt: k.ReleasedAt} {
		if src != nil {
			*dst = *src
		}
	}
	return r
}

// cleanReason fits a release reason to the API: printable, at most
// idempotency.MaxErrorLen characters.
func cleanReason(s string) string { return idempotency.FitError(s) }
