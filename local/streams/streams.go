// Package streams reads a table's DynamoDB stream (DynamoDB Local's real
// one) and hands its records to a Lambda stream handler the way the event
// source mapping does: in order per shard, in batches, and retrying from the
// first record the handler reports as failed.
package streams

import (
	"context"
	"errors"
	"log/slog"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// Handler is a Lambda DynamoDB stream handler with batch item failures.
type Handler func(context.Context, lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error)

// Reader polls one table's stream.
type Reader struct {
	DB      *dynamodb.Client
	Streams *dynamodbstreams.Client
	Table   string
	Handle  Handler
	Log     *slog.Logger
	Poll    time.Duration // wait when a shard has nothing new (default 100 ms)
	Batch   int32         // records per handler call (default 100, as the stack)
}

// Run reads until ctx ends.
func (r *Reader) Run(ctx context.Context) error {
	if r.Poll == 0 {
		r.Poll = 100 * time.Millisecond
	}
	if r.Batch == 0 {
		r.Batch = 100
	}
	t, err := r.DB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &r.Table})
	if err != nil {
		return err
	}
	if t.Table.LatestStreamArn == nil {
		return errors.New("streams: the table has no stream")
	}
	arn := t.Table.LatestStreamArn
	iters := map[string]*string{} // open shard → next iterator
	done := map[string]bool{}
	for ctx.Err() == nil {
		desc, err := r.Streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: arn})
		if err != nil {
			r.wait(ctx, time.Second)
			continue
		}
		for _, sh := range desc.StreamDescription.Shards {
			id := aws.ToString(sh.ShardId)
			parentDone := sh.ParentShardId == nil || done[*sh.ParentShardId] || !known(desc.StreamDescription.Shards, *sh.ParentShardId)
			if done[id] || iters[id] != nil || !parentDone {
				continue
			}
			it, err := r.Streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
				StreamArn: arn, ShardId: sh.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon,
			})
			if err == nil {
				iters[id] = it.ShardIterator
			}
		}
		busy := false
		for id, it := range iters {
			next, got, err := r.shard(ctx, arn, id, it)
			switch {
			case err != nil:
				r.Log.Warn("stream read failed", "shard", id, "error", err.Error())
				r.wait(ctx, time.Second) // keep the iterator: the batch is read again
			case next == nil:
				delete(iters, id)
				done[id] = true
			default:
				iters[id] = next
			}
			busy = busy || got
		}
		if !busy {
			r.wait(ctx, r.Poll)
		}
	}
	return ctx.Err()
}

// shard reads one batch of a shard and runs the handler on it until the
// handler accepts every record, as Lambda retries a batch from its first
// failed record. It returns the next iterator (nil when the shard closed).
func (r *Reader) shard(ctx context.Context, arn *string, shardID string, it *string) (*string, bool, error) {
	out, err := r.Streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it, Limit: aws.Int32(r.Batch)})
	if err != nil {
		return it, false, err
	}
	recs := out.Records
	for len(recs) > 0 && ctx.Err() == nil {
		ev := lambdaevents.DynamoDBEvent{Records: make([]lambdaevents.DynamoDBEventRecord, len(recs))}
		for i, rec := range recs {
			ev.Records[i] = convert(rec, aws.ToString(arn))
		}
		resp, err := r.Handle(ctx, ev)
		if err == nil && len(resp.BatchItemFailures) == 0 {
			break
		}
		// Retry from the first failed record (the whole batch on an error).
		from := 0
		if err == nil {
			for i, rec := range recs {
				if aws.ToString(rec.Dynamodb.SequenceNumber) == resp.BatchItemFailures[0].ItemIdentifier {
					from = i
				}
			}
		}
		r.Log.Warn("stream batch not fully processed; retrying", "shard", shardID, "from", from, "records", len(recs))
		recs = recs[from:]
		r.wait(ctx, 500*time.Millisecond)
	}
	return out.NextShardIterator, len(out.Records) > 0, nil
}

func (r *Reader) wait(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func known(shards []types.Shard, id string) bool {
	for _, s := range shards {
		if aws.ToString(s.ShardId) == id {
			return true
		}
	}
	return false
}

// convert maps a Streams API record to the Lambda event record shape.
func convert(rec types.Record, arn string) lambdaevents.DynamoDBEventRecord {
	out := lambdaevents.DynamoDBEventRecord{
		AWSRegion: aws.ToString(rec.AwsRegion), EventID: aws.ToString(rec.EventID), EventName: string(rec.EventName),
		EventSource: aws.ToString(rec.EventSource), EventVersion: aws.ToString(rec.EventVersion), EventSourceArn: arn,
	}
	if rec.UserIdentity != nil {
		out.UserIdentity = &lambdaevents.DynamoDBUserIdentity{Type: aws.ToString(rec.UserIdentity.Type), PrincipalID: aws.ToString(rec.UserIdentity.PrincipalId)}
	}
	if d := rec.Dynamodb; d != nil {
		out.Change = lambdaevents.DynamoDBStreamRecord{
			Keys: image(d.Keys), NewImage: image(d.NewImage), OldImage: image(d.OldImage),
			SequenceNumber: aws.ToString(d.SequenceNumber), SizeBytes: aws.ToInt64(d.SizeBytes), StreamViewType: string(d.StreamViewType),
		}
		if d.ApproximateCreationDateTime != nil {
			out.Change.ApproximateCreationDateTime = lambdaevents.SecondsEpochTime{Time: *d.ApproximateCreationDateTime}
		}
	}
	return out
}

func image(m map[string]types.AttributeValue) map[string]lambdaevents.DynamoDBAttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]lambdaevents.DynamoDBAttributeValue, len(m))
	for k, v := range m {
		out[k] = attr(v)
	}
	return out
}

func attr(v types.AttributeValue) lambdaevents.DynamoDBAttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return lambdaevents.NewStringAttribute(v.Value)
	case *types.AttributeValueMemberN:
		return lambdaevents.NewNumberAttribute(v.Value)
	case *types.AttributeValueMemberB:
		return lambdaevents.NewBinaryAttribute(v.Value)
	case *types.AttributeValueMemberBOOL:
		return lambdaevents.NewBooleanAttribute(v.Value)
	case *types.AttributeValueMemberSS:
		return lambdaevents.NewStringSetAttribute(v.Value)
	case *types.AttributeValueMemberNS:
		return lambdaevents.NewNumberSetAttribute(v.Value)
	case *types.AttributeValueMemberBS:
		return lambdaevents.NewBinarySetAttribute(v.Value)
	case *types.AttributeValueMemberL:
		l := make([]lambdaevents.DynamoDBAttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = attr(e)
		}
		return lambdaevents.NewListAttribute(l)
	case *types.AttributeValueMemberM:
		return lambdaevents.NewMapAttribute(image(v.Value))
	}
	return lambdaevents.NewNullAttribute()
}
