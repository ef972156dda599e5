package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// TokenRefreshMargin is how long before its expiry a bearer token is
// replaced: no request carries a token that expires within it (clock skew
// between this machine, the issuer and API Gateway, and the time a request
// takes).
const TokenRefreshMargin = 30 * time.Second

// TokenFunc returns a bearer token for the API (an access token, a JWT, from
// your issuer) and when it expires. A zero expiry means unknown: the token is
// used until the API refuses it. The client calls it when it has no token, when
// its token is within TokenRefreshMargin of its expiry, and once per logical
// call after a 401; concurrent calls share one call of it.
type TokenFunc func(ctx context.Context) (token string, expiry time.Time, err error)

// ErrUnauthorized is API Gateway's 401: the request had no credentials its
// authorizer takes (with WithBearerToken: the token was refused again after
// the one refresh the client makes).
var ErrUnauthorized = is("http_401") // the gateway's own answer (see decodeError), no API code

// WithBearerToken authorizes every request with "Authorization: Bearer
// <token>" for an API deployed with JWT authorization (exactonce:auth=jwt),
// the token from src, cached and replaced before it expires. A 401 (a
// revoked token, or one expired by the issuer's clock) makes the client
// fetch a new token and send the same logical call again, with the same
// Idempotency-Key, once; a second 401 is ErrUnauthorized. A failing src
// fails the call with its error (nothing is sent). The token is only ever
// put in that header: no error or log line of the client carries it.
// WithSigV4 and WithBearerToken replace each other: the last one given is
// used.
func WithBearerToken(src TokenFunc) Option {
	return func(c *Client) { c.bearer, c.signer = &bearer{src: src}, nil }
}

// bearer is the cached token of a Client: one fetch at a time, shared by
// every call that needs it.
type bearer struct {
	src TokenFunc

	mu      sync.Mutex
	token   string
	expiry  time.Time
	gen     uint64 // numbers the tokens fetched; 0: none yet
	pending *fetch // the fetch in flight, if any
}

// fetch is one call of the token source; done is closed when it ended.
type fetch struct {
	done     chan struct{}
	token    string
	exp      time.Time
	gen      uint64
	err      error
	canceled bool // the fetching call's own context ended (not the others')
}

// get returns the token to send and its generation. A token within the
// margin of its expiry, or of the generation refused (one the API answered
// 401 to), is replaced first, by one fetch that concurrent callers share; a
// caller waiting for another's fetch stops when its own ctx ends.
func (b *bearer) get(ctx context.Context, refused uint64) (string, uint64, error) {
	for {
		b.mu.Lock()
		if b.gen != 0 && b.gen != refused && (b.expiry.IsZero() || time.Until(b.expiry) > TokenRefreshMargin) {
			token, gen := b.token, b.gen
			b.mu.Unlock()
			return token, gen, nil
		}
		f := b.pending
		if f == nil {
			f = &fetch{done: make(chan struct{})}
			b.pending = f
			b.mu.Unlock()
			b.run(ctx, f)
			return f.token, f.gen, f.err
		}
		b.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return "", 0, ctx.Err()
		}
		if f.err == nil {
			// Taken even if it is already within its margin: it is the
			// freshest token the source gives.
			return f.token, f.gen, nil
		}
		if !f.canceled {
			return "", 0, f.err
		}
		// The fetching call gave up (its context ended): this one fetches.
	}
}

// run calls the token source for f and publishes its result.
func (b *bearer) run(ctx context.Context, f *fetch) {
	finished := false
	defer func() {
		if !finished { // the source panicked: waiters get an error, the panic goes on
			f.err = errors.New("exactonce: bearer token: the token source panicked")
		}
		b.mu.Lock()
		if f.err == nil {
			b.gen++
			b.token, b.expiry, f.gen = f.token, f.exp, b.gen
		}
		b.pending = nil
		b.mu.Unlock()
		close(f.done)
	}()
	token, expiry, err := b.src(ctx)
	switch {
	case err != nil:
		f.err, f.canceled = fmt.Errorf("exactonce: bearer token: %w", err), ctx.Err() != nil
	case token == "":
		f.err = errors.New("exactonce: bearer token: the token source returned an empty token")
	default:
		f.token, f.exp = token, expiry
	}
	finished = true
}

// unsentError is a call that failed before anything was sent (no bearer
// token, no SigV4 credentials): there is no answer to wait for, and it is
// not retried.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }
