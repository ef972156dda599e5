package store

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/tenant"
)

// Attribute names of the action item. Every expression refers to them through
// #placeholders (names below), so reserved words such as ttl need no care.
const (
	attrID             = "actionId"
	attrUserID         = "userId"
	attrKind           = "kind"
	attrActiveAtMs     = "activeAtMs"
	attrExpiresAtMs    = "expiresAtMs"
	attrCreatedAt      = "createdAt"
	attrMetadata       = "metadata"
	attrConsumedAt     = "consumedAt"
	attrConsumedReason = "consumedReason"
	attrCanceledAt     = "canceledAt"
	attrCancelReason   = "cancelReason"
	attrExpiredAt      = "expiredAt"
	attrPINHash        = "pinHash"
	attrPINFailures    = "pinFailures"
	attrMaxPINAttempts = "maxPinAttempts"
	attrPINFailedAt    = "pinFailedAt" // list of times of PIN guesses; the one that locked is the last
	attrPINTry         = "pinTry:"     // + action.TryToken: the guess's place in the count
	attrPINTryFP       = "pinTryFp:"   // + action.TryToken: the guess's request fingerprint
	attrKeyID          = "keyId"       // key set of the PIN hash and the sealed payload
	attrPayload        = "payload"
	attrTTL            = "ttl"
	attrExpShard       = "expShard" // set on create (older items: only while open): the expiry index's partition key

	attrCreateKey  = "createKey"
	attrCreateFP   = "createFingerprint"
	attrCreateReq  = "createRequestId"
	attrConsumeKey = "consumeKey"
	attrConsumeFP  = "consumeFingerprint"
	attrConsumeReq = "consumeRequestId"
	attrCancelKey  = "cancelKey"
	attrCancelFP   = "cancelFingerprint"
	attrCancelReq  = "cancelRequestId"
)

// timeLayout is how instants are stored and shown: RFC 3339, UTC, milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatTime renders t the way the item and the API show it.
func FormatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func b(v []byte) types.AttributeValue     { return &types.AttributeValueMemberB{Value: v} }
func ts(t time.Time) types.AttributeValue { return s(FormatTime(t)) }

// Decode decodes an action item (from a read, a write's return values or a
// stream image). A malformed item is an error, never a half-filled action.
func Decode(item map[string]types.AttributeValue) (*action.Action, error) {
	d := decoder{item: item}
	tn, id := tenant.SplitItemKey(d.str(attrID))
	a := &action.Action{
		Tenant:         tn,
		ID:             id,
		UserID:         d.str(attrUserID),
		Kind:           d.str(attrKind),
		ActiveAt:       time.UnixMilli(d.num(attrActiveAtMs)).UTC(),
		ExpiresAt:      time.UnixMilli(d.num(attrExpiresAtMs)).UTC(),
		CreatedAt:      d.time(attrCreatedAt),
		ConsumedAt:     d.time(attrConsumedAt),
		ConsumedReason: d.str(attrConsumedReason),
		CanceledAt:     d.time(attrCanceledAt),
		CancelReason:   d.str(attrCancelReason),
		ExpiredAt:      d.time(attrExpiredAt),
		PINHash:        d.bin(attrPINHash),
		PINFailures:    int(d.num(attrPINFailures)),
		MaxPINAttempts: int(d.num(attrMaxPINAttempts)),
		Payload:        d.bin(attrPayload),
		KeyID:          d.str(attrKeyID),
		Create:         action.Write{Key: d.str(attrCreateKey), Fingerprint: d.str(attrCreateFP), RequestID: d.str(attrCreateReq)},
		Consume:        action.Write{Key: d.str(attrConsumeKey), Fingerprint: d.str(attrConsumeFP), RequestID: d.str(attrConsumeReq)},
		Cancel:         action.Write{Key: d.str(attrCancelKey), Fingerprint: d.str(attrCancelFP), RequestID: d.str(attrCancelReq)},
	}
	if m, ok := item[attrMetadata].(*types.AttributeValueMemberM); ok {
		a.Metadata = make(map[string]string, len(m.Value))
		for k, v := range m.Value {
			sv, ok := v.(*types.AttributeValueMemberS)
			if !ok {
				d.fail(attrMetadata + "." + k)
				continue
			}
			a.Metadata[k] = sv.Value
		}
	}
	if a.Locked() {
		// No guess is counted after the one that locked: it is the last.
		if l, ok := item[attrPINFailedAt].(*types.AttributeValueMemberL); ok && len(l.Value) > 0 {
			if sv, ok := l.Value[len(l.Value)-1].(*types.AttributeValueMemberS); ok {
				a.LockedAt, _ = time.Parse(time.RFC3339Nano, sv.Value)
			}
		}
	}
	for name := range item {
		if token, ok := strings.CutPrefix(name, attrPINTry); ok {
			if a.PINTries == nil {
				a.PINTries = map[string]action.PINTry{}
			}
			a.PINTries[token] = action.PINTry{N: int(d.num(name)), Fingerprint: d.str(attrPINTryFP + token)}
		}
	}
	if a.ID == "" || a.UserID == "" {
		d.fail(attrID + "/" + attrUserID)
	}
	if d.err != nil {
		return nil, d.err
	}
	return a, nil
}

type decoder struct {
	item map[string]types.AttributeValue
	err  error
}

func (d *decoder) fail(name string) {
	if d.err == nil {
		d.err = fmt.Errorf("store: malformed attribute %q", name)
	}
}

func (d *decoder) str(name string) string {
	switch v := d.item[name].(type) {
	case nil:
		return ""
	case *types.AttributeValueMemberS:
		return v.Value
	}
	d.fail(name)
	return ""
}

func (d *decoder) num(name string) int64 {
	switch v := d.item[name].(type) {
	case nil:
		return 0
	case *types.AttributeValueMemberN:
		i, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			d.fail(name)
		}
		return i
	}
	d.fail(name)
	return 0
}

func (d *decoder) bin(name string) []byte {
	switch v := d.item[name].(type) {
	case nil:
		return nil
	case *types.AttributeValueMemberB:
		return v.Value
	}
	d.fail(name)
	return nil
}

func (d *decoder) time(name string) time.Time {
	v := d.str(name)
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		d.fail(name)
	}
	return t.UTC()
}
