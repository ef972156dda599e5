// Package batch runs an idempotent record handler over the batches Lambda
// delivers from SQS, Kinesis and DynamoDB Streams, and reports the records
// that failed the way Lambda expects (ReportBatchItemFailures on the event
// source mapping), so only they are delivered again.
//
// Give each record its own key in the wrapped handler's Options (for
// example SQSMessageID): a record delivered again after its handler
// succeeded replays instead of running twice, one still running elsewhere
// (ErrInProgress) is reported failed and retried later. Do set one: without
// a Key the whole record is the key, and a redelivered SQS message differs
// from its first delivery (receipt handle, receive count).
package batch

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
)

// SQS returns a handler for SQS events that runs fn for every message and
// reports the failed ones by message id. In a FIFO queue (messages with a
// MessageGroupId) the first failure stops the batch and every message from it
// on is reported, so order within a group holds.
func SQS[Out any](fn func(context.Context, events.SQSMessage) (Out, error)) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		for i, m := range ev.Records {
			if _, err := fn(ctx, m); err != nil {
				if m.Attributes["MessageGroupId"] != "" {
					for _, rest := range ev.Records[i:] {
						resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rest.MessageId})
					}
					return resp, nil
				}
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			}
		}
		return resp, nil
	}
}

// Kinesis returns a handler for Kinesis events that runs fn for the records
// in order and stops at the first failure, reporting its sequence number:
// Lambda retries the shard from there, so no record is handled out of order.
func Kinesis[Out any](fn func(context.Context, events.KinesisEventRecord) (Out, error)) func(context.Context, events.KinesisEvent) (events.KinesisEventResponse, error) {
	return func(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
		for _, r := range ev.Records {
			if _, err := fn(ctx, r); err != nil {
				return events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{{ItemIdentifier: r.Kinesis.SequenceNumber}}}, nil
			}
		}
		return events.KinesisEventResponse{}, nil
	}
}

// DynamoDB returns a handler for DynamoDB stream events that runs fn for the
// records in order and stops at the first failure, reporting its sequence
// number (as Kinesis does).
func DynamoDB[Out any](fn func(context.Context, events.DynamoDBEventRecord) (Out, error)) func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		for _, r := range ev.Records {
			if _, err := fn(ctx, r); err != nil {
				return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: r.Change.SequenceNumber}}}, nil
			}
		}
		return events.DynamoDBEventResponse{}, nil
	}
}

// Keys for the usual case: the id the event source gives each record, which
// stays the same on every redelivery.

// SQSMessageID keys a message by its SQS message id.
func SQSMessageID(m events.SQSMessage) (string, error) { return m.MessageId, nil }

// KinesisEventID keys a record by its event id (shard id and sequence number).
func KinesisEventID(r events.KinesisEventRecord) (string, error) { return r.EventID, nil }

// DynamoDBEventID keys a stream record by its event id.
func DynamoDBEventID(r events.DynamoDBEventRecord) (string, error) { return r.EventID, nil }

// Payloads for the usual case: what must not change under a record's key.
// Not the whole record: a redelivered SQS message has a new receipt handle
// and receive count.

// SQSBody is a message's body.
func SQSBody(m events.SQSMessage) (any, error) { return m.Body, nil }

// KinesisData is a record's data.
func KinesisData(r events.KinesisEventRecord) (any, error) { return r.Kinesis.Data, nil }

// DynamoDBChange is a stream record's keys and images.
func DynamoDBChange(r events.DynamoDBEventRecord) (any, error) {
	return []any{r.Change.Keys, r.Change.NewImage, r.Change.OldImage}, nil
}
