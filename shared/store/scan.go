package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/shared/action"
)

// ScanStats count one segment's reads.
type ScanStats struct {
	Pages, Scanned, Matched int
	// ReadUnits is the capacity the Scan consumed (as DynamoDB reports it):
	// what it is billed for, whatever the filter keeps.
	ReadUnits float64
	// Undecodable are the ids of matching items that are not valid actions
	// (skipped: they have no event to rebuild).
	Undecodable []string
}

// Window is one page of ScanWindow: the actions finished in the window,
// and the uses of multi-use actions taken or released in it.
type Window struct {
	Actions []*action.Action
	// Held are the gate entries (uses still held) taken in the window.
	Held []HeldEntry
	// Released are the take records of released uses taken or released
	// in the window.
	Released []ReleasedRecord
}

// HeldEntry is a held use found in a gate, by its action's item key.
type HeldEntry struct {
	ItemKey   string
	CreatedAt time.Time // the gate's action's createdAt
	Entry     action.Entry
}

// ReleasedRecord is a released use's take record, by its action's item key.
type ReleasedRecord struct {
	ItemKey string
	Record  *action.UseRecord
}

// ScanWindow reads segment of total (a parallel Scan, eventually
// consistent) for the actions consumed, canceled or marked expired at or
// after from and before to, and the gates and use records of the uses taken
// or released then, and calls page with each page. Idempotency-key items
// are skipped by the filter. There is no projection (a gate's entries are
// attributes named by their useIds' tokens, which a projection cannot
// list): the sealed payload and the PIN hash of an action are dropped here,
// as soon as they are read.
func ScanWindow(ctx context.Context, db *dynamodb.Client, table string, from, to time.Time, segment, total int, page func(Window) error) (ScanStats, error) {
	var st ScanStats
	id := expression.Name(attrID)
	within := func(attr string, from, to types.AttributeValue) expression.ConditionBuilder {
		return expression.Name(attr).GreaterThanEqual(expression.Value(from)).And(expression.Name(attr).LessThan(expression.Value(to)))
	}
	// Transitions are stamped in whole milliseconds, and the filter
	// compares them at that precision: a bound inside a millisecond moves
	// up to the next one (for such a t, t ≥ from iff t ≥ ⌈from⌉, t < to iff
	// t < ⌈to⌉), where formatting it would cut it down (and miss a
	// transition of that millisecond before to, or take one before from).
	from, to = ceilMillis(from), ceilMillis(to)
	f, t, fMs, tMs := ts(from), ts(to), n(from.UnixMilli()), n(to.UnixMilli())
	actions := expression.And(
		expression.Not(id.BeginsWith(KeyPrefix)), expression.Not(id.BeginsWith(GatePrefix)), expression.Not(id.BeginsWith(recordPrefix)),
		expression.AttributeExists(expression.Name(attrUserID)),
		expression.Or(within(attrConsumedAt, f, t), within(attrCanceledAt, f, t), within(attrExpiredAt, f, t)))
	records := id.BeginsWith(recordPrefix).And(within(rUsedAt, fMs, tMs).Or(within(rReleasedAt, fMs, tMs)))
	e, err := expression.NewBuilder().WithFilter(expression.Or(actions, id.BeginsWith(GatePrefix), records)).Build()
	if err != nil {
		return st, err
	}
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(table),
		Segment:                   aws.Int32(int32(segment)),
		TotalSegments:             aws.Int32(int32(total)),
		FilterExpression:          e.Filter(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	}
	for {
		out, err := db.Scan(ctx, in)
		if err != nil {
			return st, fmt.Errorf("store: scan segment %d of %d: %w", segment, total, err)
		}
		st.Pages++
		st.Scanned += int(out.ScannedCount)
		if out.ConsumedCapacity != nil {
			st.ReadUnits += aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
		}
		var w Window
		for _, item := range out.Items {
			delete(item, attrPayload)
			delete(item, attrPINHash)
			id, _ := item[attrID].(*types.AttributeValueMemberS)
			pk := ""
			if id != nil {
				pk = id.Value
			}
			if itemKey, _, ok := IsGateItem(pk); ok {
				g, err := DecodeGate(item)
				if err != nil {
					st.Undecodable = append(st.Undecodable, pk)
					continue
				}
				for _, e := range g.Entries {
					if !e.At.Before(from) && e.At.Before(to) {
						w.Held = append(w.Held, HeldEntry{ItemKey: itemKey, CreatedAt: g.CreatedAt, Entry: e})
					}
				}
				continue
			}
			if rest, ok := strings.CutPrefix(pk, recordPrefix); ok && len(rest) > 13 {
				r, err := DecodeRecord(item)
				if err != nil {
					st.Undecodable = append(st.Undecodable, pk)
					continue
				}
				if r.Op == action.OpTake && !r.ReleasedAt.IsZero() {
					w.Released = append(w.Released, ReleasedRecord{ItemKey: rest[13:], Record: r})
				}
				continue
			}
			a, err := Decode(item)
			if err != nil {
				if id != nil {
					st.Undecodable = append(st.Undecodable, id.Value)
				}
				continue
			}
			w.Actions = append(w.Actions, a)
		}
		if err := page(w); err != nil {
			return st, err
		}
		if len(out.LastEvaluatedKey) == 0 {
			return st, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// ceilMillis is t rounded up to a whole millisecond.
func ceilMillis(t time.Time) time.Time {
	if c := t.Truncate(time.Millisecond); c.Before(t) {
		return c.Add(time.Millisecond)
	}
	return t
}
