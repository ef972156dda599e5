// Package publish turns committed action writes, read from the DynamoDB
// stream, into EventBridge events: the outbox vertex of the
// effectively-once triangle. An event exists if and only if its write
// committed, and its id is deterministic, so redelivery is harmless.
//
// Multi-Region (an MRSC global table): every Region's publisher reads its
// own replica's stream, which carries the same records, and publishes every
// transition, whichever Region made it, to its own bus with the same ids. An
// event so survives the loss of any one Region, with no publisher failover;
// a subscriber of several buses de-duplicates by id. The purge's deletes
// (no TTL on MRSC) are not TTL deletions and publish nothing.
package publish

import (
	"encoding/json"
	"fmt"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/tenant"
)

// Entry is one event to publish, derived from one stream record.
type Entry struct {
	DetailType string
	EventID    string
	Detail     []byte // JSON of an events.Consumed / Canceled / Expired
}

// Derive returns the event a stream record stands for, or nil when the
// record is not a transition subscribers hear about (a create, a PIN
// counter, the TTL deletion of a finished action, any idempotency-key item,
// the sweeper's watermarks).
func Derive(rec lambdaevents.DynamoDBEventRecord) (*Entry, error) {
	if pk, ok := rec.Change.Keys["actionId"]; ok && pk.DataType() == lambdaevents.DataTypeString &&
		(store.IsKeyItem(pk.String()) || store.IsSweepItem(pk.String()) || store.IsUseItem(pk.String())) {
		return nil, nil // an idempotency key, the sweeper's watermarks, a use's gate or record (DeriveUses): not an action
	}
	var old, cur *action.Action
	var err error
	if len(rec.Change.OldImage) > 0 {
		if old, err = decode(rec.Change.OldImage); err != nil {
			return nil, err
		}
	}
	if len(rec.Change.NewImage) > 0 {
		if cur, err = decode(rec.Change.NewImage); err != nil {
			return nil, err
		}
	}
	switch rec.EventName {
	case "MODIFY":
		if old == nil || cur == nil {
			return nil, fmt.Errorf("publish: MODIFY record %s lacks an image (the stream must be NEW_AND_OLD_IMAGES)", rec.EventID)
		}
		switch {
		case old.ConsumedAt.IsZero() && !cur.ConsumedAt.IsZero():
			return consumed(cur)
		case old.CanceledAt.IsZero() && !cur.CanceledAt.IsZero():
			return canceled(cur)
		case old.ExpiredAt.IsZero() && !cur.ExpiredAt.IsZero():
			return expired(cur, "sweep")
		}
	case "REMOVE":
		if old != nil && byTTL(rec) && !old.Finished() {
			return expired(old, "ttl")
		}
	}
	return nil, nil
}

// Rebuild returns the event of the transition that finished an action read
// from the table (consumed, canceled, or marked expired by the sweeper) and
// when that transition happened, or nil for an action still open. It is
// the same event, with the same eventId, that Derive made from the stream
// record of that transition: the republish command relies on it.
func Rebuild(a *action.Action) (*Entry, time.Time, error) {
	var e *Entry
	var at time.Time
	var err error
	switch {
	case !a.ConsumedAt.IsZero():
		e, err = consumed(a)
		at = a.ConsumedAt
	case !a.CanceledAt.IsZero():
		e, err = canceled(a)
		at = a.CanceledAt
	case !a.ExpiredAt.IsZero():
		e, err = expired(a, "sweep")
		at = a.ExpiredAt
	}
	return e, at, err
}

func consumed(a *action.Action) (*Entry, error) {
	return entry(events.TypeConsumed, a, &events.Consumed{
		Common: common(events.TypeConsumed, a, a.ConsumedAt), ConsumedAt: store.FormatTime(a.ConsumedAt), Reason: a.ConsumedReason,
	})
}

func canceled(a *action.Action) (*Entry, error) {
	return entry(events.TypeCanceled, a, &events.Canceled{
		Common: common(events.TypeCanceled, a, a.CanceledAt), CanceledAt: store.FormatTime(a.CanceledAt), Reason: a.CancelReason,
	})
}

// byTTL reports whether DynamoDB's TTL process deleted the item.
func byTTL(rec lambdaevents.DynamoDBEventRecord) bool {
	return rec.UserIdentity != nil && rec.UserIdentity.Type == "Service" && rec.UserIdentity.PrincipalID == "dynamodb.amazonaws.com"
}

// expired builds action.expired. Its id and occurredAt depend only on the
// action, not on who detected the expiry, so a sweep and a TTL deletion of
// the same action yield the same event.
func expired(a *action.Action, by string) (*Entry, error) {
	return entry(events.TypeExpired, a, &events.Expired{
		Common: common(events.TypeExpired, a, a.ExpiresAt), ExpiresAt: store.FormatTime(a.ExpiresAt), DetectedBy: by,
	})
}

func common(detailType string, a *action.Action, at time.Time) events.Common {
	return events.Common{
		Version:    events.Version,
		EventID:    eventID(detailType, a),
		Tenant:     a.Tenant,
		ActionID:   a.ID,
		UserID:     a.UserID,
		Kind:       a.Kind,
		OccurredAt: store.FormatTime(at.UTC()),
		Metadata:   a.Metadata,
	}
}

func entry(detailType string, a *action.Action, detail any) (*Entry, error) {
	b, err := json.Marshal(detail)
	if err != nil {
		return nil, err
	}
	return &Entry{DetailType: detailType, EventID: eventID(detailType, a), Detail: b}, nil
}

// eventID is the transition's deterministic id. It names the action by its
// item key, so two tenants' actions of the same id never share an event id
// (and the default tenant's ids are what they always were).
func eventID(detailType string, a *action.Action) string {
	return events.EventID(detailType, tenant.ItemKey(a.Tenant, a.ID), store.FormatTime(a.CreatedAt))
}

// decode reads a stream image with the store's own decoder.
func decode(img map[string]lambdaevents.DynamoDBAttributeValue) (*action.Action, error) {
	item := make(map[string]types.AttributeValue, len(img))
	for k, v := range img {
		item[k] = attr(v)
	}
	return store.Decode(item)
}

// attr converts a Lambda stream attribute to the SDK's type.
func attr(v lambdaevents.DynamoDBAttributeValue) types.AttributeValue {
	switch v.DataType() {
	case lambdaevents.DataTypeString:
		return &types.AttributeValueMemberS{Value: v.String()}
	case lambdaevents.DataTypeNumber:
		return &types.AttributeValueMemberN{Value: v.Number()}
	case lambdaevents.DataTypeBinary:
		return &types.AttributeValueMemberB{Value: v.Binary()}
	case lambdaevents.DataTypeBoolean:
		return &types.AttributeValueMemberBOOL{Value: v.Boolean()}
	case lambdaevents.DataTypeNull:
		return &types.AttributeValueMemberNULL{Value: true}
	case lambdaevents.DataTypeStringSet:
		return &types.AttributeValueMemberSS{Value: v.StringSet()}
	case lambdaevents.DataTypeNumberSet:
		return &types.AttributeValueMemberNS{Value: v.NumberSet()}
	case lambdaevents.DataTypeBinarySet:
		return &types.AttributeValueMemberBS{Value: v.BinarySet()}
	case lambdaevents.DataTypeList:
		l := v.List()
		out := make([]types.AttributeValue, len(l))
		for i, e := range l {
			out[i] = attr(e)
		}
		return &types.AttributeValueMemberL{Value: out}
	case lambdaevents.DataTypeMap:
		m := v.Map()
		out := make(map[string]types.AttributeValue, len(m))
		for k, e := range m {
			out[k] = attr(e)
		}
		return &types.AttributeValueMemberM{Value: out}
	}
	return &types.AttributeValueMemberNULL{Value: true}
}
