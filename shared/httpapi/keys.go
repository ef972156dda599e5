package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/secretkeys"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/tenant"
)

// Route keys of the idempotency-key service.
const (
	RouteKeyClaim    = "POST /keys/{key}/claim"
	RouteKeyComplete = "POST /keys/{key}/complete"
	RouteKeyRelease  = "POST /keys/{key}/release"
	RouteKeyGet      = "GET /keys/{key}"
)

// MaxKeyBodyBytes bounds a complete's body: a 64 KiB response and its token.
const MaxKeyBodyBytes = idempotency.MaxHostedResponseBytes + 1<<10

// KeyView is the public JSON of an idempotency key. Token appears only in
// the answer to the claim that took the lease; Response only in claims of a
// completed key.
type KeyView struct {
	Key            string            `json:"key"`
	State          idempotency.State `json:"state"`
	Token          string            `json:"token,omitempty"`
	LeaseExpiresAt string            `json:"leaseExpiresAt,omitempty"`
	Attempts       int               `json:"attempts"`
	Failures       int               `json:"failures"`
	CreatedAt      string            `json:"createdAt"`
	ClaimedAt      string            `json:"claimedAt,omitempty"`
	CompletedAt    string            `json:"completedAt,omitempty"`
	ReleasedAt     string            `json:"releasedAt,omitempty"`
	LastError      string            `json:"lastError,omitempty"`
	Response       jsontext.Value    `json:"response,omitzero"`
}

func keyView(k *idempotency.Record, at time.Time) *KeyView {
	v := &KeyView{
		Key: keyName(k), State: k.StateAt(at), Attempts: k.Attempts, Failures: k.Failures,
		CreatedAt: optTime(k.CreatedAt), ClaimedAt: optTime(k.ClaimedAt), CompletedAt: optTime(k.CompletedAt),
		ReleasedAt: optTime(k.ReleasedAt), LastError: k.LastError,
	}
	if k.Token != "" && k.CompletedAt.IsZero() {
		v.LeaseExpiresAt = optTime(k.LeaseExpiresAt)
	}
	return v
}

// keyName is the key's name as its caller knows it: without the tenant's
// part of the stored name (see pathKey).
func keyName(k *idempotency.Record) string {
	_, name := tenant.SplitItemKey(k.Name)
	return name
}

// Claim handles POST /keys/{key}/claim: 201 with a lease and fencing token
// for the first caller (and for its own retries), 200 with the stored
// response once completed, 409 in_progress while another holder's lease runs.
func (a *API) Claim(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteKeyClaim, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		name, err := pathKey(&ev, c)
		if err != nil {
			return fail(err)
		}
		var req keyClaimRequest
		r, err := readRequest(&ev, c.keys, false, MaxBodyBytes, &req)
		if err != nil {
			return fail(err)
		}
		lease, err := validateKeyClaim(&req)
		if err != nil {
			return fail(err)
		}
		now := a.Now()
		token, stored := c.keys.NewKeyToken(name)
		// The item keeps the fingerprint keyed; a key claimed under an
		// earlier key set, or before fingerprints were keyed, matches too.
		// The value as sent is compared only when it cannot be a keyed
		// one: a stored value sent back must not act as the fingerprint.
		fps := c.keys.KeyFingerprints(name, req.Fingerprint)
		if _, keyed := secretkeys.KeyFingerprintID(req.Fingerprint); !keyed {
			fps = append(fps, req.Fingerprint)
		}
		k, err := a.store.ClaimKey(ctx, name, idempotency.Claim{
			Fingerprint: fps[0], SameFingerprints: fps[1:], Lease: lease, Token: stored,
			Request: idempotency.Request(r.write(c.requestID)), Fingerprints: r.fingerprints, Now: now,
		})
		var replay *idempotency.Replay
		switch {
		case errors.As(err, &replay) && !replay.Key.CompletedAt.IsZero():
			resp, err := openKeyResponse(c.keys, name, replay.Key.Response)
			if err != nil {
				return fail(err)
			}
			c.outcome = "replayed"
			v := keyView(replay.Key, now)
			v.Response = resp
			return respond(http.StatusOK, v, nil), nil
		case errors.As(err, &replay): // this caller's own claim, retried
			c.outcome = "claim_replayed"
			v := keyView(replay.Key, now)
			v.Token = c.keys.KeyToken(name, replay.Key.Token)
			return respond(http.StatusCreated, v, map[string]string{HeaderReplayed: "true"}), nil
		case err != nil:
			if unknown := heldUnderUnknownKey(err, r, c.requestID); unknown != nil {
				return fail(unknown)
			}
			if unknown := keyedUnderUnknownKey(err, c.keys); unknown != nil {
				return fail(unknown)
			}
			return fail(err)
		}
		c.outcome = "claimed"
		v := keyView(k, now)
		v.Token = token
		return respond(http.StatusCreated, v, nil), nil
	})
}

// heldUnderUnknownKey is an *action.UnknownKeyError when a claim refused
// in_progress may be that very call (the same Idempotency-Key or request
// id) but its body cannot be compared: the holder's fingerprint is under a
// key set the request has none under (a function rotated first, or a
// secret retired). nil otherwise.
func heldUnderUnknownKey(err error, r *request, requestID string) error {
	var rej *idempotency.Rejection
	if !errors.As(err, &rej) || rej.Code != idempotency.CodeInProgress || rej.Key == nil {
		return nil
	}
	held := rej.Key.Claim
	if !(r.key != "" && held.Key == r.key || held.RequestID != "" && held.RequestID == requestID) {
		return nil
	}
	return action.Comparable(held.Fingerprint, r.fingerprints)
}

// keyedUnderUnknownKey is an *action.UnknownKeyError when a claim refused
// fingerprint_mismatch met a fingerprint keyed under a key set these keys
// do not hold (a function rotated first): the two cannot be compared.
// nil otherwise.
func keyedUnderUnknownKey(err error, keys *secretkeys.Keys) error {
	var rej *idempotency.Rejection
	if !errors.As(err, &rej) || rej.Code != idempotency.CodeFingerprintMismatch || rej.Key == nil {
		return nil
	}
	if id, ok := secretkeys.KeyFingerprintID(rej.Key.Fingerprint); ok && !keys.Knows(id) {
		return &action.UnknownKeyError{KeyID: id}
	}
	return nil
}

// Complete handles POST /keys/{key}/complete: the holder stores the response
// every later claim replays. Completing again with the same token answers
// the same; a token that lost its lease gets 409 lease_lost.
func (a *API) Complete(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteKeyComplete, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		name, err := pathKey(&ev, c)
		if err != nil {
			return fail(err)
		}
		var req keyCompleteRequest
		if _, err := readRequest(&ev, c.keys, false, MaxKeyBodyBytes, &req); err != nil {
			return fail(err)
		}
		if err := validateKeyComplete(&req); err != nil {
			return fail(err)
		}
		// Stored compact: the replay is the same value, not the same bytes.
		resp := append(jsontext.Value(nil), req.Response...)
		if err := resp.Compact(); err != nil {
			return fail(&action.InvalidError{Field: "response", Message: "is not valid JSON"})
		}
		sealed := sealKeyResponse(c.keys, name, resp)
		k, err := a.store.CompleteKey(ctx, name, c.keys.StoredKeyToken(name, req.Token), sealed, a.Now())
		return a.keyAnswer(err, k, c, "completed")
	})
}

// Release handles POST /keys/{key}/release: the holder gives up after a
// failure; the key is claimable again at once and its failure count grows.
func (a *API) Release(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteKeyRelease, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		name, err := pathKey(&ev, c)
		if err != nil {
			return fail(err)
		}
		var req keyReleaseRequest
		if _, err := readRequest(&ev, c.keys, false, MaxBodyBytes, &req); err != nil {
			return fail(err)
		}
		if err := validateKeyRelease(&req); err != nil {
			return fail(err)
		}
		k, err := a.store.ReleaseKey(ctx, name, c.keys.StoredKeyToken(name, req.Token), req.Error, a.Now())
		return a.keyAnswer(err, k, c, "released")
	})
}

// A completed key's item keeps its response sealed (AES-256-GCM under the
// payload key, bound to the item), as sealedResponsePrefix and base64: a
// response carries what its effect returned (a charge id, a card's last
// digits), so it is kept like a payload. A response without the prefix
// was stored as sent, before responses were sealed: no JSON text starts
// with '~'.
const sealedResponsePrefix = "~"

func sealKeyResponse(keys *secretkeys.Keys, name string, resp []byte) []byte {
	sealed := keys.Seal(keyBinding(name), resp)
	return base64.RawStdEncoding.AppendEncode([]byte(sealedResponsePrefix), sealed)
}

// openKeyResponse is the response a completed key replays; one sealed under a
// key set these keys do not hold is an *action.UnknownKeyError (serve
// learns it).
func openKeyResponse(keys *secretkeys.Keys, name string, stored []byte) (jsontext.Value, error) {
	rest, ok := bytes.CutPrefix(stored, []byte(sealedResponsePrefix))
	if !ok {
		return stored, nil
	}
	sealed, err := base64.RawStdEncoding.DecodeString(string(rest))
	if err != nil {
		return nil, secretkeys.ErrOpen
	}
	if id := secretkeys.SealedKeyID(sealed); !keys.Knows(id) {
		return nil, &action.UnknownKeyError{KeyID: id}
	}
	return keys.Open(keyBinding(name), sealed)
}

// keyBinding is what a key's sealed response is bound to: its item, never
// an action's (whose payloads are bound to the action's item key; '#' is
// outside the action id alphabet).
func keyBinding(name string) string { return store.KeyPrefix + name }

// keyAnswer renders the 200 of a holder's complete or release, first time
// or replayed.
func (a *API) keyAnswer(err error, k *idempotency.Record, c *call, outcome string) (events.APIGatewayV2HTTPResponse, error) {
	var replay *idempotency.Replay
	var headers map[string]string
	switch {
	case errors.As(err, &replay):
		k, headers, outcome = replay.Key, map[string]string{HeaderReplayed: "true"}, "replayed"
	case err != nil:
		return fail(err)
	}
	c.outcome = outcome
	return respond(http.StatusOK, keyView(k, a.Now()), headers), nil
}

// GetKey handles GET /keys/{key}: state, counts and times; never the token,
// the fingerprint or the stored response.
func (a *API) GetKey(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteKeyGet, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		name, err := pathKey(&ev, c)
		if err != nil {
			return fail(err)
		}
		now := a.Now()
		k, err := a.store.GetKey(ctx, name, now)
		if err != nil {
			return fail(err)
		}
		c.outcome = "ok"
		return respond(http.StatusOK, keyView(k, now), nil), nil
	})
}

// pathKey reads and checks the {key} path parameter and returns the name
// the store knows it by: in the caller's tenant's key space. The log gets a
// short keyed hash of it, as of an Idempotency-Key header: a key may carry
// meaning.
func pathKey(ev *events.APIGatewayV2HTTPRequest, c *call) (string, error) {
	name := ev.PathParameters["key"]
	if err := validateKeyName(name); err != nil {
		return "", err
	}
	if c.keys != nil {
		c.keyHash = c.keys.LogHash(name)
	}
	return tenant.ItemKey(c.tenant, name), nil
}

// keyErrorBody is the error JSON of the key routes.
type keyErrorBody struct {
	Error          idempotency.Code `json:"error"`
	Message        string           `json:"message"`
	LeaseExpiresAt string           `json:"leaseExpiresAt,omitempty"`
	CompletedAt    string           `json:"completedAt,omitempty"`
	RequestID      string           `json:"requestId"`
}

var keyStatus = map[idempotency.Code]int{
	idempotency.CodeNotFound:            http.StatusNotFound,
	idempotency.CodeFingerprintMismatch: http.StatusUnprocessableEntity,
	idempotency.CodeInProgress:          http.StatusConflict,
	idempotency.CodeLeaseLost:           http.StatusConflict,
	idempotency.CodeCompleted:           http.StatusConflict,
}

var keyMessages = map[idempotency.Code]string{
	idempotency.CodeNotFound:            "no idempotency key has this name",
	idempotency.CodeFingerprintMismatch: "this key was claimed with a different fingerprint: a reused key with other parameters",
	idempotency.CodeInProgress:          "another holder's lease on this key is running; retry after the given delay",
	idempotency.CodeLeaseLost:           "this token no longer holds the key: its lease lapsed and another caller took it, or it was released",
	idempotency.CodeCompleted:           "the key is completed; it can no longer be released",
}

// keyRejection renders a refused key operation with its context; 409
// in_progress says when to retry (Retry-After, whole seconds, at least 1).
func keyRejection(r *idempotency.Rejection, requestID string, now time.Time) events.APIGatewayV2HTTPResponse {
	body := keyErrorBody{Error: r.Code, Message: keyMessages[r.Code], RequestID: requestID}
	var headers map[string]string
	if k := r.Key; k != nil {
		switch r.Code {
		case idempotency.CodeInProgress:
			body.LeaseExpiresAt = optTime(k.LeaseExpiresAt)
			wait := int(math.Ceil(k.LeaseExpiresAt.Sub(now).Seconds()))
			headers = map[string]string{"Retry-After": strconv.Itoa(max(wait, 1))}
		case idempotency.CodeCompleted:
			body.CompletedAt = optTime(k.CompletedAt)
		}
	}
	return respond(keyStatus[r.Code], body, headers)
}
