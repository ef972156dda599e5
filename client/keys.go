package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/exactonce/exactonce/idempotency"
)

// Key is an idempotency key as the /keys routes show it.
type Key struct {
	Key   string `json:"key"`
	State string `json:"state"` // in_progress, completed, failed, lease_expired
	// Token is the fencing token, only in the answer to a granted claim.
	Token          string     `json:"token,omitempty"`
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt,omitempty"`
	Attempts       int        `json:"attempts"`
	Failures       int        `json:"failures"`
	CreatedAt      time.Time  `json:"createdAt"`
	ClaimedAt      *time.Time `json:"claimedAt,omitempty"`
	CompletedAt    *time.Time `json:"completedAt,omitempty"`
	ReleasedAt     *time.Time `json:"releasedAt,omitempty"`
	LastError      string     `json:"lastError,omitempty"`
	// Response is the stored response, in a claim of a completed key.
	Response json.RawMessage `json:"response,omitempty"`
	Replayed bool            `json:"-"`
}

// Claim claims key for a side effect identified by fingerprint (e.g. a
// hash of its parameters) for lease (0: the server's default, 60 s). A
// granted claim has State "in_progress" and a Token; a completed key answers
// with State "completed" and its Response. ErrInProgress (with RetryAfter)
// while another holder's lease runs; ErrFingerprintMismatch for a key reused
// with other parameters.
func (c *Client) Claim(ctx context.Context, key, fingerprint string, lease time.Duration) (*Key, error) {
	in := struct {
		Fingerprint  string `json:"fingerprint"`
		LeaseSeconds int    `json:"leaseSeconds,omitempty"`
	}{fingerprint, int(lease.Round(time.Second) / time.Second)}
	return postFor[Key](ctx, c, "/keys/"+seg(key)+"/claim", in)
}

// Complete stores the holder's response; every later claim replays it.
// ErrLeaseLost when the token no longer holds the key.
func (c *Client) Complete(ctx context.Context, key, token string, response any) (*Key, error) {
	b, err := json.Marshal(response)
	if err != nil {
		return nil, err
	}
	return postFor[Key](ctx, c, "/keys/"+seg(key)+"/complete", struct {
		Token    string          `json:"token"`
		Response json.RawMessage `json:"response"`
	}{token, b})
}

// Release gives the key up after a failure: it is claimable again at once.
func (c *Client) Release(ctx context.Context, key, token, reason string) (*Key, error) {
	return postFor[Key](ctx, c, "/keys/"+seg(key)+"/release", struct {
		Token string `json:"token"`
		Error string `json:"error,omitempty"`
	}{token, reason})
}

// GetKey reads a key's state, counts and times (never its token or response).
func (c *Client) GetKey(ctx context.Context, key string) (*Key, error) {
	return getFor[Key](ctx, c, "/keys/"+seg(key))
}

func (k *Key) setReplayed(r bool) { k.Replayed = r }

// Do runs fn at most once per key across every caller and retry, as long as
// fn ends within its lease and its result can be stored (below): the
// idempotency library's flow (idempotency.Run) over the hosted keys
// (KeyStore). Claim the key; if it is completed, return the stored
// response; if another caller holds it, wait (Retry-After) and claim again;
// once granted, run fn, then complete the key with fn's result, or release
// it after fn's error (the error is returned; the key's lastError is the
// library's fixed text, as with Wrap: an error's text may carry what fn
// worked on, and the key is readable by GET /keys for its retention) so a
// later call may try again. The result is fn's value
// as JSON. A key reused with another fingerprint is
// idempotency.ErrPayloadMismatch (and ErrFingerprintMismatch).
//
// fn can run twice under a key in two ways, both after its lease lapses:
//   - fn outlives the lease: another caller may take over and this caller's
//     complete fails with ErrLeaseLost (fn's effect then happened, and the
//     other caller's may too).
//   - fn's result cannot be stored: it does not encode to JSON (NaN, a
//     channel) or its JSON is over idempotency.MaxHostedResponseBytes
//     (64 KiB). Do returns idempotency.ErrResponseNotStored
//     (ErrResponseTooLarge for the size) and does not release the key, but
//     the hosted keys cannot hold it for longer than its lease: until the
//     lease ends, a Do under the key waits; after it, the next Do runs fn
//     again.
//
// So keep the lease above fn's longest run and fn's result small and
// encodable, or keep fn itself idempotent. A claim answered after half its
// lease (the client's retries of a slow or lost answer) does not run fn: Do
// gives the key back and claims again.
//
// For typed inputs and outputs, hooks and a cache, use idempotency.Wrap with
// Store: c.KeyStore().
func (c *Client) Do(ctx context.Context, key, fingerprint string, lease time.Duration, fn func(context.Context) (any, error)) (json.RawMessage, error) {
	call := idempotency.Call{Key: key, Fingerprint: fingerprint, Lease: lease}
	for {
		res, err := idempotency.Run(ctx, c.KeyStore(), call, func(ctx context.Context) ([]byte, error) {
			v, err := fn(ctx)
			if err != nil {
				return nil, err
			}
			return encodeResult(v)
		})
		var busy *idempotency.InProgressError
		switch {
		case errors.As(err, &busy):
			if err := sleep(ctx, max(busy.RetryAfter, 100*time.Millisecond)); err != nil {
				return nil, err
			}
			continue
		case err != nil:
			return nil, err
		}
		return res.Response, nil
	}
}

// encodeResult is fn's result as JSON. fn has run (its effect happened), so
// a result that cannot be encoded (NaN, a channel, a panicking MarshalJSON)
// is idempotency.ErrResponseNotStored: Run keeps the key held rather than
// release it for a retry to run fn again.
func encodeResult(v any) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("%w: encode the result: panic: %v", idempotency.ErrResponseNotStored, r)
		}
	}()
	if b, err = json.Marshal(v); err != nil {
		return nil, fmt.Errorf("%w: encode the result: %w", idempotency.ErrResponseNotStored, err)
	}
	return b, nil
}
