package store

import (
	"context"
	"errors"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/dynamoitem"
	"github.com/exactonce/exactonce/shared/action"
)

// ExpiryIndex is the sparse global secondary index of actions by expiry:
// partition key expShard (set on create), sort key expiresAtMs, keys only.
//
// An entry stays until DynamoDB TTL deletes its item (free of charge): the
// writes that finish an action (consume, cancel, expire) leave expShard and
// expiresAtMs as they are, and an update that changes neither key of a
// keys-only index writes nothing to it, so each of them costs one table
// write and no index write. The sweeper reads every entry once, when it
// falls due, behind a per-shard watermark (Watermarks), and skips the
// finished ones with a cheap read (Finished) instead of a write.
// Items written before this design carry expShard only while open; they
// expire the same way.
const ExpiryIndex = "byExpiry"

// expiryShard spreads actions over the index's partitions.
func expiryShard(id string, shards int) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	return strconv.Itoa(int(h.Sum32() % uint32(shards)))
}

// Expire marks a due, open action expired with one conditional write (its
// index entry stays: no index write); ttl keeps its end of retention.
// It reports false when the action was finished (or gone) already: a
// consume that won the race, another sweep, a cancel.
func (st *Store) Expire(ctx context.Context, id string, now time.Time) (bool, error) {
	now = action.Millis(now)
	// Unfinished (not consumed, canceled or already expired) and due.
	// A failed condition is all it needs to know (finished, not due or
	// gone): the old item is not decoded, so one it cannot read (a
	// malformed attribute) does not fail the sweep's page.
	due := unfinished().And(expression.Name(attrExpiresAtMs).LessThanEqual(expression.Value(n(now.UnixMilli()))))
	ctx, resent := countResends(ctx)
	_, old, failed, err := st.exprWrite(ctx, id, set(expression.UpdateBuilder{}, attrExpiredAt, ts(now)), &due, types.ReturnValueNone)
	if err != nil {
		return false, err
	}
	if failed && resent.Load() > 0 {
		// The SDK sent the write again after an answer that did not come:
		// the first may have applied. An item marked at this write's time
		// was marked by it (its answer lost), not by someone else.
		at, ok := old[attrExpiredAt].(*types.AttributeValueMemberS)
		return ok && at.Value == FormatTime(now), nil
	}
	return !failed, nil
}

// DueAction is an entry of the expiry index.
type DueAction struct {
	ID        string
	ExpiresAt time.Time
}

// DuePageSize bounds the entries of one page of Due, so a sweep that runs
// out of time keeps the progress of the pages it finished.
const DuePageSize = 500

// Due pages through one shard of the expiry index for entries with
// after < expiresAtMs <= upTo (in ms; ascending), calling page with each
// page until the shard is exhausted or page returns false. The index is
// eventually consistent and keeps finished actions: Finished and Expire
// tell which are still open.
func (st *Store) Due(ctx context.Context, shard int, after int64, upTo time.Time, page func([]DueAction) bool) error {
	if after >= upTo.UnixMilli() {
		return nil
	}
	e, err := expression.NewBuilder().
		WithKeyCondition(expression.Key(attrExpShard).Equal(expression.Value(s(strconv.Itoa(shard)))).
			And(expression.Key(attrExpiresAtMs).Between(expression.Value(n(after+1)), expression.Value(n(upTo.UnixMilli()))))).
		WithProjection(expression.NamesList(expression.Name(attrID), expression.Name(attrExpiresAtMs))).
		Build()
	if err != nil {
		return err
	}
	p := dynamodb.NewQueryPaginator(st.db, &dynamodb.QueryInput{
		TableName:                 &st.table,
		IndexName:                 aws.String(ExpiryIndex),
		KeyConditionExpression:    e.KeyCondition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
		ProjectionExpression:      e.Projection(),
		Limit:                     aws.Int32(DuePageSize),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return classifyErr(err)
		}
		due := make([]DueAction, 0, len(out.Items))
		for _, it := range out.Items {
			id, ok := it[attrID].(*types.AttributeValueMemberS)
			exp, ok2 := it[attrExpiresAtMs].(*types.AttributeValueMemberN)
			if !ok || !ok2 {
				continue
			}
			ms, _ := strconv.ParseInt(exp.Value, 10, 64)
			due = append(due, DueAction{ID: id.Value, ExpiresAt: time.UnixMilli(ms)})
		}
		if len(due) > 0 && !page(due) {
			return nil
		}
	}
	return nil
}

// batchGetMax is BatchGetItem's limit of keys per request.
const batchGetMax = 100

// Finished returns the ids among due whose item a read shows finished
// (consumed, canceled or expired) with the same expiresAt as the entry:
// those need no write. It reads with BatchGetItem, eventually consistent
// (half a read unit per item of up to 4 KB): a stale answer can only show
// an older state, and a finished action never reopens, so an action is
// never wrongly skipped; one shown open, missing or still left unprocessed
// after the store's retries is simply not in the result, and Expire's
// condition decides.
func (st *Store) Finished(ctx context.Context, due []DueAction) (map[string]bool, error) {
	want := make(map[string]int64, len(due))
	ids := make([]string, len(due))
	for i, d := range due {
		want[d.ID], ids[i] = d.ExpiresAt.UnixMilli(), d.ID
	}
	items, err := st.read(ctx, ids, []string{attrExpiresAtMs, attrConsumedAt, attrCanceledAt, attrExpiredAt}, false)
	if err != nil && !errors.Is(err, errUnprocessed) {
		return nil, err
	}
	done := map[string]bool{}
	for _, it := range items {
		if it == nil {
			continue
		}
		d := dynamoitem.Decoder{Item: it}
		id, exp := d.Str(attrID), d.Num(attrExpiresAtMs)
		finished := d.Str(attrConsumedAt) != "" || d.Str(attrCanceledAt) != "" || d.Str(attrExpiredAt) != ""
		if d.Err == nil && finished && exp == want[id] {
			done[id] = true
		}
	}
	return done, nil
}

// WatermarkID is the partition key of the sweeper's own item: for each
// shard of the expiry index (attribute "w<shard>"), the expiresAtMs up to
// which every entry has been handled. '#' is outside the action id
// alphabet, so no action can take this key.
const WatermarkID = "sweep#watermarks"

// IsSweepItem reports whether a partition key is the sweeper's item.
func IsSweepItem(pk string) bool { return pk == WatermarkID }

func watermarkAttr(shard int) string { return "w" + strconv.Itoa(shard) }

// Watermarks reads the sweeper's watermarks (one eventually consistent
// GetItem; a stale one is only lower, so entries are read again, never
// skipped). A shard without one (a new table or shard, an old table) is 0.
func (st *Store) Watermarks(ctx context.Context) (map[int]int64, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.table, Key: key(WatermarkID)})
	if err != nil {
		return nil, classifyErr(err)
	}
	marks := map[int]int64{}
	d := dynamoitem.Decoder{Item: out.Item}
	for shard := range st.shards {
		marks[shard] = d.Num(watermarkAttr(shard))
	}
	return marks, d.Err
}

// AdvanceWatermarks raises the given shards' watermarks with one
// conditional write; a watermark never goes down, so overlapping sweeps
// cannot undo each other's progress. If another sweep got further on one
// of them, each shard is raised on its own (rare: sweeps seldom overlap).
func (st *Store) AdvanceWatermarks(ctx context.Context, marks map[int]int64) error {
	shards := slices.Sorted(maps.Keys(marks))
	raise := func(shards []int) (failed bool, err error) {
		var u expression.UpdateBuilder
		var cond expression.ConditionBuilder
		for i, shard := range shards {
			a, v := expression.Name(watermarkAttr(shard)), expression.Value(n(marks[shard]))
			u = u.Set(a, v)
			lower := expression.AttributeNotExists(a).Or(a.LessThan(v))
			if i == 0 {
				cond = lower
			} else {
				cond = cond.And(lower)
			}
		}
		_, _, failed, err = st.exprWrite(ctx, WatermarkID, u, &cond, types.ReturnValueNone)
		return failed, err
	}
	// An expression is at most 4 KB: the condition of 80 shards is past it,
	// so the shards go watermarkChunk to a write.
	for chunk := range slices.Chunk(shards, watermarkChunk) {
		failed, err := raise(chunk)
		if err != nil {
			return err
		}
		if !failed || len(chunk) == 1 {
			continue
		}
		for _, shard := range chunk {
			if _, err := raise([]int{shard}); err != nil {
				return err
			}
		}
	}
	return nil
}

// watermarkChunk is how many shards' watermarks one write raises (its
// condition is about 2.5 KB).
const watermarkChunk = 50
