package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/tenant"
)

// A multi-use action's uses are entries of its gates (see shared/store):
// the stream record of a gate write that added an entry is an action.used,
// one that removed an entry an action.use_released. What the event needs
// beyond the gate (the useId and reason, on the take's record; the action's
// common fields) is read from the table (UseReader), one BatchGetItem for a
// batch of records.

// UseReader reads the actions and use records that use events need.
type UseReader interface {
	ReadUseContext(ctx context.Context, itemKeys []string, records []store.RecordKey) (*store.UseContext, error)
}

// UseChange is one use taken or released, as a gate's stream record shows it.
type UseChange struct {
	Type       string    // events.TypeUsed or events.TypeUseReleased
	ItemKey    string    // the action's
	CreatedAt  time.Time // the action's createdAt, as its gate has it
	Take       string    // the take's record name
	UsedAt     time.Time
	ReleasedAt time.Time
}

// DeriveUses returns the use changes of a gate's stream record (nil for a
// record of another kind, or a gate write that changed no use: a create
// of a closed gate, a forward, a cancel closing it, a TTL deletion).
func DeriveUses(rec lambdaevents.DynamoDBEventRecord) ([]UseChange, error) {
	pk, ok := rec.Change.Keys["actionId"]
	if !ok || pk.DataType() != lambdaevents.DataTypeString {
		return nil, nil
	}
	itemKey, _, ok := store.IsGateItem(pk.String())
	if !ok || rec.EventName == "REMOVE" {
		return nil, nil
	}
	cur, err := decodeGate(rec.Change.NewImage)
	if err != nil {
		return nil, err
	}
	old := &action.Gate{}
	if len(rec.Change.OldImage) > 0 {
		if old, err = decodeGate(rec.Change.OldImage); err != nil {
			return nil, err
		}
	}
	if !old.CreatedAt.Equal(cur.CreatedAt) {
		old = &action.Gate{} // the gate of an earlier action of this id, replaced
	}
	var out []UseChange
	for _, tok := range slices.Sorted(maps.Keys(cur.Entries)) {
		if e, ok := old.Entries[tok]; !ok || e != cur.Entries[tok] {
			out = append(out, UseChange{Type: events.TypeUsed, ItemKey: itemKey, CreatedAt: cur.CreatedAt, Take: cur.Entries[tok].Ref,
				UsedAt: cur.Entries[tok].At})
		}
	}
	for _, tok := range slices.Sorted(maps.Keys(old.Entries)) {
		if _, ok := cur.Entries[tok]; ok {
			continue
		}
		rel := cur.LastReleaseTime
		if cur.LastRelease != tok {
			return nil, fmt.Errorf("publish: gate %s freed a use without its release time", pk.String())
		}
		out = append(out, UseChange{Type: events.TypeUseReleased, ItemKey: itemKey, CreatedAt: cur.CreatedAt, Take: old.Entries[tok].Ref,
			UsedAt: old.Entries[tok].At, ReleasedAt: rel})
	}
	return out, nil
}

func decodeGate(img map[string]lambdaevents.DynamoDBAttributeValue) (*action.Gate, error) {
	item := make(map[string]types.AttributeValue, len(img))
	for k, v := range img {
		item[k] = attr(v)
	}
	return store.DecodeGate(item)
}

// UseEntries builds the events of changes with what r reads. A change
// whose action or take record is not in the table (deleted since, or the
// id's action now is another), or does not decode, is an UnreadableError
// naming it: the record is then reported like any undecodable one.
func UseEntries(ctx context.Context, r UseReader, changes []UseChange) ([]*Entry, error) {
	if len(changes) == 0 {
		return nil, nil
	}
	var items []string
	var recs []store.RecordKey
	for _, c := range changes {
		items = append(items, c.ItemKey)
		recs = append(recs, store.RecordKey{ItemKey: c.ItemKey, Ref: c.Take})
	}
	uc, err := r.ReadUseContext(ctx, slices.Compact(slices.Sorted(slices.Values(items))), recs)
	if err != nil {
		return nil, err
	}
	out := make([]*Entry, 0, len(changes))
	for _, c := range changes {
		a, rec, err := uc.Use(store.RecordKey{ItemKey: c.ItemKey, Ref: c.Take}, c.CreatedAt)
		if err != nil {
			return nil, &UnreadableError{ItemKey: c.ItemKey, Take: c.Take, Err: err}
		}
		e, err := useEvent(c, a, rec)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// UnreadableError is a use change whose event the table cannot give: its
// action or take record is gone, is another action's, or does not decode.
type UnreadableError struct {
	ItemKey, Take string
	Err           error
}

func (e *UnreadableError) Error() string {
	return "publish: use " + e.Take + " of " + e.ItemKey + ": " + e.Err.Error()
}

func (e *UnreadableError) Unwrap() error { return e.Err }

// useEvent is the event of one change.
func useEvent(c UseChange, a *action.Action, rec *action.UseRecord) (*Entry, error) {
	if c.Type == events.TypeUsed {
		cm := useCommon(events.TypeUsed, a, rec.UseID, c.UsedAt, c.UsedAt)
		return useEntry(events.TypeUsed, cm, &events.Used{
			Common: cm, UseID: rec.UseID, UsedAt: store.FormatTime(c.UsedAt), MaxUses: a.MaxUses, Reason: rec.Reason,
		})
	}
	cm := useCommon(events.TypeUseReleased, a, rec.UseID, c.UsedAt, c.ReleasedAt)
	return useEntry(events.TypeUseReleased, cm, &events.UseReleased{
		Common: cm, UseID: rec.UseID, UsedAt: store.FormatTime(c.UsedAt), ReleasedAt: store.FormatTime(c.ReleasedAt),
	})
}

// useCommon is common with the use's own event id.
func useCommon(detailType string, a *action.Action, useID string, usedAt, at time.Time) events.Common {
	c := common(detailType, a, at)
	c.EventID = useEventID(detailType, a, useID, usedAt)
	return c
}

func useEntry(detailType string, c events.Common, detail any) (*Entry, error) {
	b, err := json.Marshal(detail)
	if err != nil {
		return nil, err
	}
	return &Entry{DetailType: detailType, EventID: c.EventID, Detail: b}, nil
}

// useEventID names one use by its action, its useId and when it was
// taken: a useId's takes are stamped in the order they committed, each
// later than the release before it, so a take again after a release is a
// new id; the release of that take has its own.
func useEventID(detailType string, a *action.Action, useID string, usedAt time.Time) string {
	return events.EventID(detailType, tenant.ItemKey(a.Tenant, a.ID),
		store.FormatTime(a.CreatedAt)+"\x00"+useID+"\x00"+store.FormatTime(usedAt))
}

// RebuildUses returns the events of the uses of one action that a table
// read shows: a held use (a gate entry) is its action.used; a released one
// (its take's record, stamped by the release) its action.used and its
// action.use_released. Each with the time it happened, for republish's
// window; the same ids Derive gave them.
func RebuildUses(a *action.Action, held []UseChange, released []*action.UseRecord, records map[string]*action.UseRecord) ([]*Entry, []time.Time, error) {
	var out []*Entry
	var at []time.Time
	add := func(c UseChange, rec *action.UseRecord, when time.Time) error {
		e, err := useEvent(c, a, rec)
		if err == nil {
			out, at = append(out, e), append(at, when)
		}
		return err
	}
	for _, c := range held {
		c.Type = events.TypeUsed
		rec := records[c.Take]
		if rec == nil {
			continue
		}
		if err := add(c, rec, c.UsedAt); err != nil {
			return nil, nil, err
		}
	}
	for _, rec := range released {
		used := UseChange{Type: events.TypeUsed, Take: rec.Ref, UsedAt: rec.UsedAt}
		if err := add(used, rec, rec.UsedAt); err != nil {
			return nil, nil, err
		}
		rel := UseChange{Type: events.TypeUseReleased, Take: rec.Ref, UsedAt: rec.UsedAt, ReleasedAt: rec.ReleasedAt}
		if err := add(rel, rec, rec.ReleasedAt); err != nil {
			return nil, nil, err
		}
	}
	return out, at, nil
}
