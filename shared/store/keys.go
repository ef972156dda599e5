package store

import (
	"context"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/idemkey"
	"github.com/exactonce/exactonce/shared/tenant"
)

// KeyPrefix starts the partition key of every idempotency-key item. '#' is
// outside the action id alphabet, so a key item and an action never share
// an item, and the stream publisher can tell them apart.
const KeyPrefix = "key#"

// IsKeyItem reports whether a partition key value is an idempotency key's.
func IsKeyItem(pk string) bool { return strings.HasPrefix(pk, KeyPrefix) }

// Attribute names of key items (the partition key is attrID, as for actions).
const (
	attrKeyFP        = "fingerprint"
	attrKeyToken     = "token"
	attrKeyLeaseMs   = "leaseExpiresAtMs"
	attrKeyClaimedAt = "claimedAt"
	attrKeyDoneAt    = "completedAt"
	attrKeyReleased  = "releasedAt"
	attrKeyResponse  = "response"
	attrKeyAttempts  = "attempts"
	attrKeyFailures  = "failures"
	attrKeyLastError = "lastError"
	attrKeyRelToken  = "releasedToken"
	attrKeyClaimKey  = "claimKey"
	attrKeyClaimReq  = "claimRequestId"
	attrKeyClaimFP   = "claimFingerprint" // keyed fingerprint of the claim request's body
)

// The conditions of the key transitions.
const (
	// claimable: new, past its retention, or (same parameters, not
	// completed, and nobody's lease running).
	condClaimable = "attribute_not_exists({actionId}) OR {ttl} <= :nowS OR ({fingerprint} = :fp" +
		" AND attribute_not_exists({completedAt}) AND (attribute_not_exists({token}) OR {leaseExpiresAtMs} <= :nowMs))"
	// held: the token is the current holder's and nothing finished the key.
	condHeld = "{token} = :token AND attribute_not_exists({completedAt})"
)

// Claim is a request to claim a key.
type Claim struct {
	Fingerprint  string
	Lease        time.Duration
	Token        string // the new fencing token (idemkey.NewToken)
	Write        action.Write
	Fingerprints []string // the claim request body's under every known key set
	Now          time.Time
}

// ClaimKey takes the key for one holder with one conditional write: a new
// key, a released one, or one whose lease lapsed. Otherwise it returns
// idemkey.ClassifyClaim's answer (a *idemkey.Replay for a completed key or
// the caller's own claim, else a *idemkey.Rejection).
func (st *Store) ClaimKey(ctx context.Context, name string, c Claim) (*idemkey.Key, error) {
	now := action.Millis(c.Now)
	u := newUpdate()
	u.set(attrKeyFP, s(c.Fingerprint))
	u.set(attrKeyToken, s(c.Token))
	u.set(attrKeyLeaseMs, n(now.Add(c.Lease).UnixMilli()))
	u.set(attrKeyClaimedAt, ts(now))
	u.sets = append(u.sets, u.name(attrCreatedAt)+" = if_not_exists("+u.name(attrCreatedAt)+", "+u.value("now", ts(now))+")")
	u.set(attrTTL, n(now.Add(st.keyRetention+c.Lease).Unix()))
	u.adds = append(u.adds, u.name(attrKeyAttempts)+" "+u.value("one", n(1)))
	u.set(attrKeyClaimReq, s(c.Write.RequestID))
	u.set(attrKeyClaimFP, s(c.Write.Fingerprint))
	if c.Write.Key != "" {
		u.set(attrKeyClaimKey, s(c.Write.Key))
	} else {
		u.remove(attrKeyClaimKey)
	}
	// A key past its retention starts over: nothing of its old answer stays.
	u.remove(attrKeyDoneAt)
	u.remove(attrKeyResponse)
	u.remove(attrKeyRelToken)
	u.value("fp", s(c.Fingerprint))
	u.value("nowMs", n(now.UnixMilli()))
	u.value("nowS", n(now.Unix()))

	w, o, failed, err := st.write(ctx, KeyPrefix+name, u, u.cond(condClaimable), types.ReturnValueAllNew)
	if err != nil {
		return nil, err
	}
	if !failed {
		return decodeKey(w)
	}
	old, err := decodeKey(o)
	if err != nil {
		return nil, err
	}
	return nil, idemkey.ClassifyClaim(old, idemkey.ClaimAttempt{Now: now, Fingerprint: c.Fingerprint, Write: c.Write, Fingerprints: c.Fingerprints})
}

// CompleteKey stores the response of the holder of token with one
// conditional write; the key then replays it until its retention ends.
func (st *Store) CompleteKey(ctx context.Context, name, token string, response jsontext.Value, now time.Time) (*idemkey.Key, error) {
	now = action.Millis(now)
	u := newUpdate()
	u.set(attrKeyDoneAt, ts(now))
	u.set(attrKeyResponse, s(string(response)))
	u.set(attrTTL, n(now.Add(st.keyRetention).Unix()))
	u.value("token", s(token))
	return st.keyTransition(ctx, name, u, func(old *idemkey.Key) error { return idemkey.ClassifyComplete(old, token) })
}

// ReleaseKey gives the key up after a failed attempt, with one conditional
// write: it is claimable again at once, and its failure count grows.
func (st *Store) ReleaseKey(ctx context.Context, name, token, errText string, now time.Time) (*idemkey.Key, error) {
	now = action.Millis(now)
	u := newUpdate()
	u.set(attrKeyReleased, ts(now))
	u.set(attrKeyRelToken, s(token))
	if errText != "" {
		u.set(attrKeyLastError, s(errText))
	} else {
		u.remove(attrKeyLastError)
	}
	u.set(attrTTL, n(now.Add(st.keyRetention).Unix()))
	u.adds = append(u.adds, u.name(attrKeyFailures)+" "+u.value("one", n(1)))
	for _, a := range []string{attrKeyToken, attrKeyLeaseMs, attrKeyClaimKey, attrKeyClaimReq, attrKeyClaimFP} {
		u.remove(a)
	}
	u.value("token", s(token))
	return st.keyTransition(ctx, name, u, func(old *idemkey.Key) error { return idemkey.ClassifyRelease(old, token) })
}

// keyTransition runs a holder's write (condition: still held by :token)
// and classifies a refusal with classify.
func (st *Store) keyTransition(ctx context.Context, name string, u *update, classify func(*idemkey.Key) error) (*idemkey.Key, error) {
	w, o, failed, err := st.write(ctx, KeyPrefix+name, u, u.cond(condHeld), types.ReturnValueAllNew)
	if err != nil {
		return nil, err
	}
	if !failed {
		return decodeKey(w)
	}
	var old *idemkey.Key
	if o != nil {
		if old, err = decodeKey(o); err != nil {
			return nil, err
		}
	}
	return nil, classify(old)
}

// GetKey reads a key with a strongly consistent read; a key past its
// retention reads as not found.
func (st *Store) GetKey(ctx context.Context, name string, now time.Time) (*idemkey.Key, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &st.table, Key: key(KeyPrefix + name), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, classifyErr(err)
	}
	if out.Item == nil {
		return nil, &idemkey.Rejection{Code: idemkey.CodeNotFound}
	}
	k, err := decodeKey(out.Item)
	if err != nil {
		return nil, err
	}
	if k.Gone(now) {
		return nil, &idemkey.Rejection{Code: idemkey.CodeNotFound}
	}
	return k, nil
}

func decodeKey(item map[string]types.AttributeValue) (*idemkey.Key, error) {
	if item == nil {
		return nil, nil
	}
	d := decoder{item: item}
	_, name := tenant.SplitItemKey(strings.TrimPrefix(d.str(attrID), KeyPrefix))
	k := &idemkey.Key{
		Name:           name,
		Fingerprint:    d.str(attrKeyFP),
		Token:          d.str(attrKeyToken),
		LeaseExpiresAt: time.UnixMilli(d.num(attrKeyLeaseMs)).UTC(),
		CreatedAt:      d.time(attrCreatedAt),
		ClaimedAt:      d.time(attrKeyClaimedAt),
		CompletedAt:    d.time(attrKeyDoneAt),
		ReleasedAt:     d.time(attrKeyReleased),
		Attempts:       int(d.num(attrKeyAttempts)),
		Failures:       int(d.num(attrKeyFailures)),
		LastError:      d.str(attrKeyLastError),
		ReleasedToken:  d.str(attrKeyRelToken),
		Claim:          action.Write{Key: d.str(attrKeyClaimKey), Fingerprint: d.str(attrKeyClaimFP), RequestID: d.str(attrKeyClaimReq)},
		ExpiresAt:      time.Unix(d.num(attrTTL), 0).UTC(),
	}
	if r := d.str(attrKeyResponse); r != "" {
		k.Response = jsontext.Value(r)
	}
	if k.Token == "" {
		k.LeaseExpiresAt = time.Time{}
	}
	if !IsKeyItem(d.str(attrID)) {
		d.fail(attrID)
	}
	if d.err != nil {
		return nil, d.err
	}
	return k, nil
}
