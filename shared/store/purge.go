package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Purging is what DynamoDB TTL does on a single-Region table, for a table
// without TTL (a multi-Region strongly consistent one): every item carries
// its end of retention in ttl (epoch seconds), and an item is deleted once
// that has passed, each with one conditional DeleteItem. Until then it
// answers as always (409 already_used, 410 expired or canceled, a key's
// replay), so a late caller sees no difference.

// purgeable holds at the moment of the delete: the retention has ended, and
// the item is not an open action (an action nobody finished, which the
// sweeper has yet to mark expired, is kept so its action.expired is not
// lost; keys and other items carry no userId).
func purgeable(now time.Time) expression.ConditionBuilder {
	return expression.Name(attrTTL).LessThanEqual(expression.Value(n(now.Unix()))).
		And(expression.Or(expression.AttributeNotExists(expression.Name(attrUserID)),
			expression.AttributeExists(expression.Name(attrConsumedAt)),
			expression.AttributeExists(expression.Name(attrCanceledAt)),
			expression.AttributeExists(expression.Name(attrExpiredAt))))
}

// ScanPurgeable reads segment of total (a parallel Scan, eventually
// consistent: a stale read can only list an item whose ttl has since moved
// on, which the delete's condition then keeps) for the items purgeable at
// now, and calls page with each page's keys. Only the key is returned; the
// Scan is billed for every item it reads (half a read unit per 4 KB).
func (st *Store) ScanPurgeable(ctx context.Context, segment, total int, now time.Time, page func(keys []string) error) (ScanStats, error) {
	var stats ScanStats
	e, err := expression.NewBuilder().WithFilter(purgeable(now)).WithProjection(expression.NamesList(expression.Name(attrID))).Build()
	if err != nil {
		return stats, err
	}
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(st.table),
		Segment:                   aws.Int32(int32(segment)),
		TotalSegments:             aws.Int32(int32(total)),
		FilterExpression:          e.Filter(),
		ProjectionExpression:      e.Projection(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	}
	for {
		out, err := st.db.Scan(ctx, in)
		if err != nil {
			return stats, fmt.Errorf("store: purge scan segment %d of %d: %w", segment, total, classifyErr(err))
		}
		stats.Pages++
		stats.Scanned += int(out.ScannedCount)
		if out.ConsumedCapacity != nil {
			stats.ReadUnits += aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
		}
		keys := make([]string, 0, len(out.Items))
		for _, item := range out.Items {
			if id, ok := item[attrID].(*types.AttributeValueMemberS); ok {
				keys = append(keys, id.Value)
			}
		}
		stats.Matched += len(keys)
		if err := page(keys); err != nil {
			return stats, err
		}
		if len(out.LastEvaluatedKey) == 0 {
			return stats, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// Purge deletes the item pk with one conditional DeleteItem if it is
// purgeable at now (see ScanPurgeable): deleted is false when it was not
// (gone already, its retention moved on, an open action), and true when the
// SDK sent it again after a lost answer and found the item gone (units is
// then 0). units is the write capacity DynamoDB reports for it, index
// writes included.
func (st *Store) Purge(ctx context.Context, pk string, now time.Time) (deleted bool, units float64, err error) {
	e, err := expression.NewBuilder().WithCondition(purgeable(now)).Build()
	if err != nil {
		return false, 0, err
	}
	ctx, resent := countResends(ctx)
	out, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                           aws.String(st.table),
		Key:                                 key(pk),
		ConditionExpression:                 e.Condition(),
		ExpressionAttributeNames:            e.Names(),
		ExpressionAttributeValues:           e.Values(),
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityIndexes,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, resendCounter(ctx)...)
	var failed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &failed):
		// Re-sent by the SDK after an answer that did not come, and gone
		// now: the first attempt deleted it (its units are not known).
		return resent.Load() > 0 && failed.Item == nil, 0, nil
	case err != nil:
		// No item named: a hosted key's partition key is its name, which may carry meaning.
		return false, 0, fmt.Errorf("store: purge: %w", classifyErr(err))
	}
	if out.ConsumedCapacity != nil {
		units = aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
	}
	return true, units, nil
}
