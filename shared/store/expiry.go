package store

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/shared/action"
)

// ExpiryIndex is the sparse global secondary index of open actions by
// expiry: partition key expShard (set on create, removed by the write that
// finishes the action), sort key expiresAtMs, keys only.
const ExpiryIndex = "byExpiry"

// expiryShard spreads open actions over the index's partitions.
func expiryShard(id string, shards int) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	return strconv.Itoa(int(h.Sum32() % uint32(shards)))
}

// condExpirable: open (not consumed, canceled or already expired) and due.
const condExpirable = "attribute_exists({actionId}) AND attribute_not_exists({consumedAt})" +
	" AND attribute_not_exists({canceledAt}) AND attribute_not_exists({expiredAt})" +
	" AND {expiresAtMs} <= :nowMs"

// Expire marks a due, open action expired with one conditional write, which
// also takes it out of the expiry index; ttl keeps its end of retention.
// It reports false when the action was finished (or gone) already: a
// consume that won the race, another sweep, a cancel.
func (st *Store) Expire(ctx context.Context, id string, now time.Time) (bool, error) {
	now = action.Millis(now)
	u := newUpdate()
	u.set(attrExpiredAt, ts(now))
	u.remove(attrExpShard)
	u.value("nowMs", n(now.UnixMilli()))
	_, old, err := st.update(ctx, id, u, u.cond(condExpirable), types.ReturnValueNone)
	var r *action.Rejection
	switch {
	case errors.As(err, &r) && r.Code == action.CodeNotFound:
		return false, nil
	case err != nil:
		return false, err
	}
	return old == nil, nil
}

// DueAction is an entry of the expiry index.
type DueAction struct {
	ID        string
	ExpiresAt time.Time
}

// Due pages through one shard of the expiry index for actions whose
// expiresAt is at or before now, calling page with each page until the
// shard is exhausted or page returns false. The index is eventually
// consistent: an action may already be finished, which Expire tells.
func (st *Store) Due(ctx context.Context, shard int, now time.Time, page func([]DueAction) bool) error {
	p := dynamodb.NewQueryPaginator(st.db, &dynamodb.QueryInput{
		TableName:              &st.table,
		IndexName:              aws.String(ExpiryIndex),
		KeyConditionExpression: aws.String("#shard = :shard AND #exp <= :nowMs"),
		ExpressionAttributeNames: map[string]string{
			"#shard": attrExpShard, "#exp": attrExpiresAtMs, "#id": attrID,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":shard": s(strconv.Itoa(shard)),
			":nowMs": n(now.UnixMilli()),
		},
		ProjectionExpression: aws.String("#id, #exp"),
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
		if !page(due) {
			return nil
		}
	}
	return nil
}
