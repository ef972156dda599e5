package store

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/dynamoitem"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/tenant"
)

// A legacy multi-use item was written before gates: it kept every use on
// the action's own item (use:<useId>, useN:<useId>, useKey:<digest>,
// relKey:<digest>, relAt:<digest>) and the count in usesHeld. Reads of it
// (GET, listings) answer from the item; the first take, release or uses
// listing moves it to gates (migrate) and it is an item like any other
// from then on. A cancel or expiry needs no migration (it closes the gates
// it finds, creating them closed).
const (
	legacyUsesHeld = "usesHeld"
	legacyUse      = "use:"
	legacyUseN     = "useN:"
	legacyUseKey   = "useKey:"
	legacyRelKey   = "relKey:"
	legacyRelAt    = "relAt:"
)

// isLegacy reports whether an action item keeps its uses on itself.
func isLegacy(item map[string]types.AttributeValue) bool {
	_, ok := item[legacyUsesHeld]
	return ok
}

// legacyUse is one useId's latest use as a legacy item kept it.
type legacyUseRec struct {
	ID         string
	At         time.Time
	Reason     string
	Write      action.Write
	ReleasedAt time.Time
	Release    action.Write
}

// legacyUses reads the uses, keyed takes and keyed releases of a legacy item.
func legacyUses(item map[string]types.AttributeValue) (uses map[string]legacyUseRec, useKeys map[string]string, rels map[string]legacyRel, err error) {
	d := dynamoitem.Decoder{Item: item}
	uses, useKeys, rels = map[string]legacyUseRec{}, map[string]string{}, map[string]legacyRel{}
	for name, v := range item {
		switch {
		case strings.HasPrefix(name, legacyUseKey):
			useKeys[strings.TrimPrefix(name, legacyUseKey)] = d.Str(name)
		case strings.HasPrefix(name, legacyRelKey):
			k := strings.TrimPrefix(name, legacyRelKey)
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				d.Fail(name)
				continue
			}
			f := dynamoitem.Decoder{Item: m.Value}
			rels[k] = legacyRel{UseID: f.Str("u"), At: d.Time(legacyRelAt + k), ReleasedAt: f.Time("rel"), Fingerprint: f.Str("f")}
			if f.Err != nil {
				d.Fail(name)
			}
		case strings.HasPrefix(name, legacyUse):
			id := strings.TrimPrefix(name, legacyUse)
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				d.Fail(name)
				continue
			}
			f := dynamoitem.Decoder{Item: m.Value}
			uses[id] = legacyUseRec{ID: id, At: f.Time("at"), Reason: f.Str("reason"),
				Write:      action.Write{Key: f.Str("k"), Fingerprint: f.Str("f")},
				ReleasedAt: f.Time("rel"), Release: action.Write{Key: f.Str("rk"), Fingerprint: f.Str("rf")}}
			if f.Err != nil {
				d.Fail(name)
			}
		}
	}
	return uses, useKeys, rels, d.Err
}

type legacyRel struct {
	UseID       string
	At          time.Time
	ReleasedAt  time.Time
	Fingerprint string
}

// migrate moves a legacy item's uses to gates and records: every held use
// becomes its gate entry (with its take time, so its events keep their
// ids) and a record; every keyed take and keyed release a record with its
// answer, so re-sent keys still replay; then one conditional write takes
// the legacy attributes off the item (only if no legacy write changed it
// meanwhile). Running it twice, or concurrently, is harmless: each write is
// conditional on its item not being there yet. Takes of the action wait
// for it: they read the item first and find it legacy until it is done.
func (st *Store) migrate(ctx context.Context, item map[string]types.AttributeValue, a *action.Action, now time.Time) (*action.Action, error) {
	uses, useKeys, rels, err := legacyUses(item)
	if err != nil {
		return nil, err
	}
	ttl := st.ttlOf(a)
	if t := a.ExpiresAt.Add(st.retention); t.Unix() < ttl {
		ttl = t.Unix()
	}
	// Held uses in the order they were taken: a releasable action's gate
	// stamps its writes in order, and these keep their times (so they go
	// one by one there; elsewhere 16 at once).
	ids := slices.SortedFunc(maps.Keys(uses), func(x, y string) int { return uses[x].At.Compare(uses[y].At) })
	width := 16
	if a.Releasable {
		width = 1
	}
	err = parallelN(ctx, len(ids), width, func(ctx context.Context, k int) error {
		id := ids[k]
		u := uses[id]
		w := u.Write
		if w.Key == "" {
			w.RequestID = "legacy-" + id // a stable name for the record of an unkeyed take
		}
		rec := &action.UseRecord{Ref: action.RefHash(action.UseRef(action.OpTake, w)), Op: action.OpTake, UseID: id, Write: w,
			Reason: u.Reason, RequestedAt: u.At}
		if !u.ReleasedAt.IsZero() {
			rec.Outcome, rec.Of, rec.UsedAt, rec.ReleasedAt, rec.Release = action.OutcomeOK, rec.Ref, u.At, u.ReleasedAt, u.Release
		}
		if _, err := st.putRecord(ctx, a, rec, ttl, now); err != nil {
			return err
		}
		if u.ReleasedAt.IsZero() && now.Before(a.ExpiresAt) && a.CanceledAt.IsZero() {
			if _, err := st.place(ctx, a, action.UseToken(id), action.Entry{Ref: rec.Ref, At: u.At}, maxTime(now, u.At)); err != nil && !isCode(err, action.CodeNotActive) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A key that took an earlier use of a useId (its latest use was taken
	// under another key) was answered 422 by the legacy item: so it stays.
	for digest, id := range useKeys {
		if u, ok := uses[id]; ok && u.Write.Key == digest {
			continue
		}
		rec := &action.UseRecord{Ref: action.RefHash(action.UseRef(action.OpTake, action.Write{Key: digest})), Op: action.OpTake,
			UseID: id, Write: action.Write{Key: digest}, RequestedAt: now, Outcome: action.CodeKeyReused}
		if _, err := st.putRecord(ctx, a, rec, ttl, now); err != nil {
			return nil, err
		}
	}
	for digest, r := range rels {
		rec := &action.UseRecord{Ref: action.RefHash(action.UseRef(action.OpRelease, action.Write{Key: digest})), Op: action.OpRelease,
			UseID: r.UseID, Write: action.Write{Key: digest, Fingerprint: r.Fingerprint}, RequestedAt: r.ReleasedAt,
			Outcome: action.OutcomeOK, UsedAt: r.At, ReleasedAt: r.ReleasedAt}
		if _, err := st.putRecord(ctx, a, rec, ttl, now); err != nil {
			return nil, err
		}
	}
	// The legacy attributes go in chunks (an expression is at most 4 KB),
	// usesHeld last: until it is gone the item is legacy, and a migration
	// that stopped half way runs again (each of its writes finds its work
	// done). Their names may hold dots (a useId "x.y"): the expression
	// builder is told not to read them as paths (useIds hold no brackets).
	var names []string
	for name := range item {
		for _, p := range []string{legacyUse, legacyUseN, legacyUseKey, legacyRelKey, legacyRelAt} {
			if strings.HasPrefix(name, p) {
				names = append(names, name)
			}
		}
	}
	names = append(names, legacyUsesHeld)
	for chunk := range slices.Chunk(names, 200) {
		var u expression.UpdateBuilder
		for _, name := range chunk {
			u = u.Remove(expression.NameNoDotSplit(name))
		}
		cond := expression.Name(legacyUsesHeld).Equal(expression.Value(item[legacyUsesHeld]))
		if _, _, _, err = st.exprWrite(ctx, tenant.ItemKey(a.Tenant, a.ID), u, &cond, types.ReturnValueNone); err != nil {
			return nil, err
		}
	}
	a.UsesHeld = 0
	return a, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
