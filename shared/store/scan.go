package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
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

// ScanFinished reads segment of total (a parallel Scan, eventually
// consistent) for the actions consumed, canceled or marked expired at or
// after from and before to, and calls page with each page's actions.
// Idempotency-key items are skipped by the filter. The projection leaves
// out the payload and the PIN hash (they are read, and billed, but never
// returned).
func ScanFinished(ctx context.Context, db *dynamodb.Client, table string, from, to time.Time, segment, total int, page func([]*action.Action) error) (ScanStats, error) {
	var st ScanStats
	in := &dynamodb.ScanInput{
		TableName:     aws.String(table),
		Segment:       aws.Int32(int32(segment)),
		TotalSegments: aws.Int32(int32(total)),
		FilterExpression: aws.String("NOT begins_with(#id, :kp) AND attribute_exists(#user) AND " +
			"((#c >= :from AND #c < :to) OR (#x >= :from AND #x < :to) OR (#e >= :from AND #e < :to))"),
		ProjectionExpression: aws.String("#id, #user, #kind, #active, #expires, #created, #c, #cr, #x, #xr, #e, #meta"),
		ExpressionAttributeNames: map[string]string{
			"#id": attrID, "#user": attrUserID, "#kind": attrKind, "#active": attrActiveAtMs, "#expires": attrExpiresAtMs,
			"#created": attrCreatedAt, "#c": attrConsumedAt, "#cr": attrConsumedReason, "#x": attrCanceledAt, "#xr": attrCancelReason,
			"#e": attrExpiredAt, "#meta": attrMetadata,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":kp": s(KeyPrefix), ":from": ts(from), ":to": ts(to),
		},
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
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
		actions := make([]*action.Action, 0, len(out.Items))
		for _, item := range out.Items {
			a, err := Decode(item)
			if err != nil {
				id, _ := item[attrID].(*types.AttributeValueMemberS)
				if id != nil {
					st.Undecodable = append(st.Undecodable, id.Value)
				}
				continue
			}
			actions = append(actions, a)
		}
		st.Matched += len(actions)
		if err := page(actions); err != nil {
			return st, err
		}
		if len(out.LastEvaluatedKey) == 0 {
			return st, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
