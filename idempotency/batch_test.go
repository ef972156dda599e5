package idempotency_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/batch"
	"github.com/exactonce/exactonce/internal/testkit"
)

// TestBatches: every record under its own key; failures reported the way
// Lambda expects for each source (standard SQS: each failed message; FIFO
// SQS: from the first failure on; Kinesis and DynamoDB streams: the first
// failure's sequence number, nothing after it run); records handled before
// replay on redelivery.
func TestBatches(t *testing.T) {
	t.Parallel()
	table, _ := newTable(t, testkit.DynamoDB(t))
	ctx := context.Background()
	var ran []string
	fail := map[string]bool{}
	handle := func(id string) (string, error) {
		if fail[id] {
			return "", errors.New("failed " + id)
		}
		ran = append(ran, id)
		return "ok " + id, nil
	}

	t.Run("sqs", func(t *testing.T) {
		ran, fail = nil, map[string]bool{"s2": true, "f2": true}
		h := batch.SQS(idempotency.Wrap(func(ctx context.Context, m events.SQSMessage) (string, error) { return handle(m.MessageId) },
			idempotency.Options[events.SQSMessage, string]{Store: table, Namespace: "sqs", Key: batch.SQSMessageID, Payload: batch.SQSBody}))
		msgs := func(ids ...string) (ms []events.SQSMessage) {
			for _, id := range ids {
				ms = append(ms, events.SQSMessage{MessageId: id, Body: "body " + id, ReceiptHandle: "rh-" + string(rune(len(ran)))})
			}
			return ms
		}
		resp, err := h(ctx, events.SQSEvent{Records: msgs("s1", "s2", "s3")})
		if err != nil || !slices.Equal(sqsIDs(resp), []string{"s2"}) || !slices.Equal(ran, []string{"s1", "s3"}) {
			t.Fatalf("standard: failures %v ran %v %v", sqsIDs(resp), ran, err)
		}
		fifo := msgs("f1", "f2", "f3")
		for i := range fifo {
			fifo[i].Attributes = map[string]string{"MessageGroupId": "g"}
		}
		ran = nil
		resp, _ = h(ctx, events.SQSEvent{Records: fifo})
		if !slices.Equal(sqsIDs(resp), []string{"f2", "f3"}) || !slices.Equal(ran, []string{"f1"}) {
			t.Fatalf("fifo: failures %v ran %v", sqsIDs(resp), ran)
		}
		ran, fail = nil, map[string]bool{}
		resp, _ = h(ctx, events.SQSEvent{Records: msgs("s1", "s2", "s3", "f2", "f3")}) // redelivered
		if len(resp.BatchItemFailures) != 0 || !slices.Equal(ran, []string{"s2", "f2", "f3"}) {
			t.Fatalf("redelivery: failures %v ran %v (want only the failed ones run)", sqsIDs(resp), ran)
		}
	})

	t.Run("kinesis", func(t *testing.T) {
		ran, fail = nil, map[string]bool{"k2": true}
		h := batch.Kinesis(idempotency.Wrap(func(ctx context.Context, r events.KinesisEventRecord) (string, error) { return handle(r.EventID) },
			idempotency.Options[events.KinesisEventRecord, string]{Store: table, Namespace: "kinesis", Key: batch.KinesisEventID, Payload: batch.KinesisData}))
		var ev events.KinesisEvent
		for i, id := range []string{"k1", "k2", "k3"} {
			ev.Records = append(ev.Records, events.KinesisEventRecord{EventID: id, Kinesis: events.KinesisRecord{SequenceNumber: string(rune('1' + i)), Data: []byte(id)}})
		}
		resp, _ := h(ctx, ev)
		if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "2" || !slices.Equal(ran, []string{"k1"}) {
			t.Fatalf("failures %v ran %v (want sequence 2, k3 not run out of order)", resp.BatchItemFailures, ran)
		}
		ran, fail = nil, map[string]bool{}
		if resp, _ = h(ctx, ev); len(resp.BatchItemFailures) != 0 || !slices.Equal(ran, []string{"k2", "k3"}) {
			t.Fatalf("retry: failures %v ran %v", resp.BatchItemFailures, ran)
		}
	})

	t.Run("dynamodb", func(t *testing.T) {
		ran, fail = nil, map[string]bool{"d1": true}
		h := batch.DynamoDB(idempotency.Wrap(func(ctx context.Context, r events.DynamoDBEventRecord) (string, error) { return handle(r.EventID) },
			idempotency.Options[events.DynamoDBEventRecord, string]{Store: table, Namespace: "ddb", Key: batch.DynamoDBEventID, Payload: batch.DynamoDBChange}))
		var ev events.DynamoDBEvent
		for i, id := range []string{"d1", "d2"} {
			ev.Records = append(ev.Records, events.DynamoDBEventRecord{EventID: id, Change: events.DynamoDBStreamRecord{SequenceNumber: string(rune('1' + i)),
				Keys: map[string]events.DynamoDBAttributeValue{"id": events.NewStringAttribute(id)}}})
		}
		resp, _ := h(ctx, ev)
		if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "1" || len(ran) != 0 {
			t.Fatalf("failures %v ran %v", resp.BatchItemFailures, ran)
		}
		fail = map[string]bool{}
		if resp, _ = h(ctx, ev); len(resp.BatchItemFailures) != 0 || !slices.Equal(ran, []string{"d1", "d2"}) {
			t.Fatalf("retry: failures %v ran %v", resp.BatchItemFailures, ran)
		}
	})
}

func sqsIDs(r events.SQSEventResponse) (ids []string) {
	for _, f := range r.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}
