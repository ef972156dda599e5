// Package client is the Go client of the ExactOnce HTTP API: typed calls for
// every route, errors that errors.Is understands, and retries that are safe
// because every logical call carries one Idempotency-Key on all its attempts.
//
//	c := client.New("https://abc123.execute-api.eu-west-1.amazonaws.com", client.WithSigV4(awsCfg))
//	a, err := c.Consume(ctx, "coupon-42", client.ConsumeInput{Reason: "checkout 981"})
//	if errors.Is(err, client.ErrAlreadyUsed) { ... }
//
// An API deployed with JWT authorization takes client.WithBearerToken(token)
// instead of WithSigV4: a token function, called before the token expires.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/exactonce/exactonce/idempotency"
)

// Client calls one ExactOnce deployment. It is safe for concurrent use.
type Client struct {
	base   string
	http   *http.Client
	retry  Retry
	signer *sigV4
	bearer *bearer // WithBearerToken
	caller string
}

// Retry is the retry policy: capped exponential backoff with full jitter
// (a random wait up to min(MaxDelay, BaseDelay·2^attempt)), or the server's
// Retry-After when it gives one (in full: bound a call with its context).
type Retry struct {
	MaxAttempts int           // attempts per call, the first included (default 5)
	BaseDelay   time.Duration // default 100 ms
	MaxDelay    time.Duration // default 5 s
}

// Option configures a Client.
type Option func(*Client)

// WithCaller makes every call, on a local server (make run), as the given
// IAM principal ARN: the X-Exactonce-Caller header, which the local server
// maps to a tenant as API Gateway's IAM authorizer does the SigV4 signer in
// AWS (there the header is ignored; use WithSigV4 with that principal's
// credentials).
func WithCaller(principalARN string) Option { return func(c *Client) { c.caller = principalARN } }

// WithHTTPClient sets the HTTP client (default: a client with a 30 s timeout).
// The client uses a shallow copy of h whose CheckRedirect follows no
// redirect (h itself is not changed): an answer 3xx is returned as a *Error
// with its status, not retried, so no request, credential, PIN or
// Idempotency-Key goes to another URL and no other server's answer passes
// for the API's.
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) {
		if h != nil {
			c.http = noRedirects(h)
		}
	}
}

// noRedirects is a shallow copy of h that follows no redirect: the answer
// 3xx itself is returned (and becomes a *Error).
func noRedirects(h *http.Client) *http.Client {
	cp := *h
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// WithRetry sets the retry policy; zero fields keep their defaults.
func WithRetry(r Retry) Option {
	return func(c *Client) {
		if r.MaxAttempts > 0 {
			c.retry.MaxAttempts = r.MaxAttempts
		}
		if r.BaseDelay > 0 {
			c.retry.BaseDelay = r.BaseDelay
		}
		if r.MaxDelay > 0 {
			c.retry.MaxDelay = r.MaxDelay
		}
	}
}

// WithSigV4 signs every request for API Gateway's IAM authorization
// (service execute-api) with cfg's credentials and region, e.g. from
// config.LoadDefaultConfig (the default credential chain). It replaces
// WithBearerToken given before it.
func WithSigV4(cfg aws.Config) Option {
	return func(c *Client) {
		c.signer, c.bearer = &sigV4{creds: cfg.Credentials, region: cfg.Region, signer: v4.NewSigner()}, nil
	}
}

// New returns a client for the API at baseURL (the stack's ApiUrl output, or
// http://127.0.0.1:8080 for `make run`).
func New(baseURL string, opts ...Option) *Client {
	c := &Client{
		base:  trimSlash(baseURL),
		http:  noRedirects(&http.Client{Timeout: 30 * time.Second}),
		retry: Retry{MaxAttempts: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// NewIdempotencyKey returns a random key (128 bits, hex) for one logical call.
func NewIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// call is one logical call: the same method, path, body and Idempotency-Key
// on every attempt.
type call struct {
	method, path string
	body         []byte
	key          string      // "" for GET
	header       http.Header // set after the client's own (Send)
	// refused is the bearer token (its generation) the API answered 401
	// to in this call: the next attempt sends another.
	refused uint64
}

// response is a decoded answer.
type response struct {
	status   int
	header   http.Header
	body     []byte
	replayed bool
	tokenGen uint64 // the bearer token sent (its generation), 0 for none
	// untilClose: the body ends where the connection did (HTTP/1, no
	// Content-Length, no chunks), so a connection cut mid-body looks like
	// its end to net/http; only the JSON shows it.
	untilClose bool
}

// do runs a call with retries and decodes a 2xx body into out; any other
// answer becomes an *Error (a 3xx too: redirects are not followed).
func (c *Client) do(ctx context.Context, cl call, out any) (*response, error) {
	var last error
	for attempt := 0; attempt < c.retry.MaxAttempts; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, c.backoff(attempt, last)); err != nil {
				return nil, err
			}
		}
		r, err := c.once(ctx, cl)
		if err == nil && r.status == http.StatusUnauthorized && r.tokenGen != 0 && cl.refused == 0 {
			// The bearer token was refused: replace it and send the same
			// call again, once per logical call.
			cl.refused = r.tokenGen
			r, err = c.once(ctx, cl)
		}
		var unsent *unsentError
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &unsent):
			return nil, unsent.err // nothing was sent
		}
		if errors.Is(err, ErrResponseTooLarge) && r != nil && !retryable(r.status) {
			return nil, err // an answer came (not the service's): its status is not retried
		}
		if err != nil {
			last = &networkError{err}
			continue // the request may or may not have been applied: the key makes the retry safe
		}
		if r.status >= 200 && r.status < 300 {
			if out != nil {
				// Every answer the service sends with a body is an object:
				// JSON null would leave out as it was, a zero value with no error.
				if bytes.Equal(bytes.TrimSpace(r.body), []byte("null")) {
					return r, fmt.Errorf("exactonce: decoding a %d answer: null, not an object", r.status)
				}
				if r.untilClose && truncatedJSON(r.body) {
					// The connection closed inside the answer: it never
					// came whole, so it is sent again, as for a reset.
					last = &networkError{fmt.Errorf("a %d answer cut short: %w", r.status, io.ErrUnexpectedEOF)}
					continue
				}
				if err := json.Unmarshal(r.body, out); err != nil {
					return r, fmt.Errorf("exactonce: decoding a %d answer: %w", r.status, err)
				}
			}
			return r, nil
		}
		apiErr := decodeError(r)
		// in_progress after an attempt whose answer never came: that
		// attempt is still running on the server; its answer comes to a
		// retry once it ends.
		// (The keys routes answer a caller's own lease back to its key:
		// there in_progress is another holder's.)
		ownRunning := last != nil && cl.key != "" && strings.HasPrefix(cl.path, "/actions/") && apiErr.Code == string(idempotency.CodeInProgress)
		if !retryable(r.status) && !ownRunning {
			return r, apiErr
		}
		last = apiErr
	}
	return nil, last
}

// Response is an answer as Send got it.
type Response struct {
	StatusCode int
	Header     http.Header
	Body       []byte
}

// Send makes ONE request as the client's calls do (its SigV4 signature or
// bearer token, its caller header), with body (nil: none; else sent as
// application/json unless header says otherwise) and header, and returns
// the answer as it came: no retry, no refreshed token, no decoding, and a
// 4xx or 5xx is an answer, not an error. It is for what the typed calls do
// not cover (a raw body, a header of your own, a route of a newer server).
func (c *Client) Send(ctx context.Context, method, path string, body []byte, header http.Header) (*Response, error) {
	r, err := c.once(ctx, call{method: method, path: path, body: body, header: header})
	var unsent *unsentError
	if errors.As(err, &unsent) {
		return nil, unsent.err
	}
	if err != nil {
		return nil, err
	}
	return &Response{StatusCode: r.status, Header: r.header, Body: r.body}, nil
}

// MaxResponseBytes bounds the body of an answer the client reads: API
// Gateway answers at most 10 MB, so a longer body is not the service's.
const MaxResponseBytes = 10 << 20

// ErrResponseTooLarge is returned for an answer whose body is longer than
// MaxResponseBytes; the client stops reading it, and retries it only as its
// status says (429 and 5xx).
var ErrResponseTooLarge = errors.New("exactonce: answer body over 10 MiB: not the service's")

// once sends one attempt.
func (c *Client) once(ctx context.Context, cl call) (*response, error) {
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, c.base+cl.path, body)
	if err != nil {
		return nil, err
	}
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cl.key != "" {
		req.Header.Set("Idempotency-Key", cl.key)
	}
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if c.caller != "" {
		req.Header.Set("X-Exactonce-Caller", c.caller)
	}
	if c.signer != nil {
		if err := c.signer.sign(ctx, req, cl.body); err != nil {
			return nil, &unsentError{err}
		}
	}
	var tokenGen uint64
	if c.bearer != nil {
		token, gen, err := c.bearer.get(ctx, cl.refused)
		if err != nil {
			return nil, &unsentError{err}
		}
		req.Header.Set("Authorization", "Bearer "+token)
		tokenGen = gen
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxResponseBytes {
		return &response{status: resp.StatusCode, header: resp.Header, tokenGen: tokenGen}, ErrResponseTooLarge
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b, replayed: resp.Header.Get("Idempotent-Replayed") == "true", tokenGen: tokenGen,
		untilClose: resp.ProtoMajor == 1 && resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 && !resp.Uncompressed}, nil
}

// truncatedJSON reports whether b ends before its JSON value does (or
// holds none): what a body cut by its connection's end looks like.
func truncatedJSON(b []byte) bool {
	err := json.NewDecoder(bytes.NewReader(b)).Decode(new(json.RawMessage))
	return err == io.EOF || err == io.ErrUnexpectedEOF
}

// retryable: throttling and server-side faults; never another 4xx, which is
// an outcome that a retry would only repeat.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// backoff is the wait before attempt (1, 2, …): the server's Retry-After if
// the last answer had one, else full jitter under the capped exponential.
func (c *Client) backoff(attempt int, last error) time.Duration {
	var e *Error
	if errors.As(last, &e) && e.RetryAfter > 0 {
		return e.RetryAfter
	}
	// ceiling is min(MaxDelay, BaseDelay·2^(attempt-1)), compared before
	// shifting: BaseDelay<<shift ≤ MaxDelay exactly when BaseDelay ≤
	// MaxDelay>>shift, so the shift never overflows (20 s·2^29 would, and
	// a negative ceiling made crypto/rand panic).
	ceiling := max(c.retry.MaxDelay, 0)
	if shift := max(attempt-1, 0); shift < 63 && c.retry.BaseDelay <= ceiling>>shift {
		ceiling = max(c.retry.BaseDelay<<shift, 0)
	}
	// Up to ceiling inclusive, in big.Int: ceiling+1 overflows at MaxInt64.
	n, err := rand.Int(rand.Reader, new(big.Int).Add(big.NewInt(int64(ceiling)), big.NewInt(1)))
	if err != nil {
		return ceiling
	}
	return time.Duration(n.Int64())
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// post is a POST with a JSON body and a fresh Idempotency-Key for the
// logical call.
func post(path string, in any) (call, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return call{}, err
	}
	return call{method: http.MethodPost, path: path, body: b, key: NewIdempotencyKey()}, nil
}

// answer is a decoded 2xx body that records whether it was replayed.
type answer[T any] interface {
	*T
	setReplayed(bool)
}

// postFor runs a POST of in as one logical call and decodes its answer.
func postFor[T any, PT answer[T]](ctx context.Context, c *Client, path string, in any) (*T, error) {
	cl, err := post(path, in)
	if err != nil {
		return nil, err
	}
	var out T
	r, err := c.do(ctx, cl, &out)
	if err != nil {
		return nil, err
	}
	PT(&out).setReplayed(r.replayed)
	return &out, nil
}

// getFor runs a GET (naturally idempotent: no key) and decodes its answer.
func getFor[T any](ctx context.Context, c *Client, path string) (*T, error) {
	var out T
	if _, err := c.do(ctx, call{method: http.MethodGet, path: path}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func seg(s string) string { return url.PathEscape(s) }

func trimSlash(s string) string {
	for len(s) > 0 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}

// sigV4 signs requests for API Gateway's IAM authorization.
type sigV4 struct {
	creds  aws.CredentialsProvider
	region string
	signer *v4.Signer
}

func (s *sigV4) sign(ctx context.Context, req *http.Request, body []byte) error {
	if s.creds == nil {
		return errors.New("exactonce: SigV4 needs credentials (aws.Config.Credentials)")
	}
	creds, err := s.creds.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("exactonce: credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	return s.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "execute-api", s.region, time.Now())
}

// retryAfter parses a Retry-After header: delay-seconds, or an HTTP-date
// (RFC 9110, 10.2.3; a date past is no wait).
func retryAfter(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if n, err := strconv.Atoi(v); err == nil {
		if n > int(math.MaxInt64/time.Second) {
			return math.MaxInt64 // the longest wait a Duration holds, not a wrapped one
		}
		return time.Duration(max(n, 0)) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(time.Until(at), 0)
	}
	return 0
}
