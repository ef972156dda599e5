package store

import (
	"errors"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/dynamoitem"
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
	attrPINFailedAt    = "pinFailedAt"        // list of times of PIN guesses; the one that locked is the last
	attrConsumePINFail = "consumePinFailures" // pinFailures as the consuming write left it
	attrPINTry         = "pinTry:"            // + action.TryToken: the guess's place in the count
	attrPINTryFP       = "pinTryFp:"          // + action.TryToken: the guess's request fingerprint
	attrKeyID          = "keyId"              // key set of the PIN hash and the sealed payload
	attrPayload        = "payload"
	attrTTL            = "ttl"
	attrSupersedes     = "supersedes" // "1" on an action created with supersede
	attrExpShard       = "expShard"   // set on create (older items: only while open): the expiry index's partition key

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

var (
	s = dynamoitem.S
	n = dynamoitem.N
	b = dynamoitem.B
)

func ts(t time.Time) types.AttributeValue { return s(FormatTime(t)) }

var errMalformed = errors.New("malformed")

// Decode decodes an action item (from a read, a write's return values or a
// stream image). A malformed item is an error, never a half-filled action.
func Decode(item map[string]types.AttributeValue) (*action.Action, error) {
	d := dynamoitem.Decoder{Item: item}
	tn, id := tenant.SplitItemKey(d.Str(attrID))
	a := &action.Action{
		Tenant:         tn,
		ID:             id,
		UserID:         d.Str(attrUserID),
		Kind:           d.Str(attrKind),
		Supersedes:     d.Str(attrSupersedes) != "",
		ActiveAt:       time.UnixMilli(d.Num(attrActiveAtMs)).UTC(),
		ExpiresAt:      time.UnixMilli(d.Num(attrExpiresAtMs)).UTC(),
		CreatedAt:      d.Time(attrCreatedAt),
		ConsumedAt:     d.Time(attrConsumedAt),
		ConsumedReason: d.Str(attrConsumedReason),
		CanceledAt:     d.Time(attrCanceledAt),
		CancelReason:   d.Str(attrCancelReason),
		ExpiredAt:      d.Time(attrExpiredAt),
		PINHash:        d.Bin(attrPINHash),
		PINFailures:    int(d.Num(attrPINFailures)),
		MaxPINAttempts: int(d.Num(attrMaxPINAttempts)),
		Payload:        d.Bin(attrPayload),
		KeyID:          d.Str(attrKeyID),
		Create:         action.Write{Key: d.Str(attrCreateKey), Fingerprint: d.Str(attrCreateFP), RequestID: d.Str(attrCreateReq)},
		Consume:        action.Write{Key: d.Str(attrConsumeKey), Fingerprint: d.Str(attrConsumeFP), RequestID: d.Str(attrConsumeReq)},
		Cancel:         action.Write{Key: d.Str(attrCancelKey), Fingerprint: d.Str(attrCancelFP), RequestID: d.Str(attrCancelReq)},
	}
	if m, ok := item[attrMetadata].(*types.AttributeValueMemberM); ok {
		a.Metadata = make(map[string]string, len(m.Value))
		for k, v := range m.Value {
			sv, ok := v.(*types.AttributeValueMemberS)
			if !ok {
				d.Fail(attrMetadata + "." + k)
				continue
			}
			a.Metadata[k] = sv.Value
		}
	}
	decodeUses(&d, a)
	if _, ok := item[attrConsumePINFail]; ok {
		n := int(d.Num(attrConsumePINFail))
		a.ConsumePINFailures = &n
	}
	if a.Locked() {
		// No guess is counted after the one that locked: it is the last.
		// One that cannot be read is an error, never a lock without its time.
		if v, ok := item[attrPINFailedAt]; ok {
			l, ok := v.(*types.AttributeValueMemberL)
			var err error = errMalformed
			if ok && len(l.Value) > 0 {
				if sv, ok := l.Value[len(l.Value)-1].(*types.AttributeValueMemberS); ok {
					a.LockedAt, err = time.Parse(time.RFC3339Nano, sv.Value)
				}
			}
			if err != nil {
				d.Fail(attrPINFailedAt)
			}
		}
	}
	for name := range item {
		if token, ok := strings.CutPrefix(name, attrPINTry); ok {
			if a.PINTries == nil {
				a.PINTries = map[string]action.PINTry{}
			}
			a.PINTries[token] = action.PINTry{N: int(d.Num(name)), Fingerprint: d.Str(attrPINTryFP + token)}
		}
	}
	if a.ID == "" || a.UserID == "" {
		d.Fail(attrID + "/" + attrUserID)
	}
	if d.Err != nil {
		return nil, d.Err
	}
	return a, nil
}
