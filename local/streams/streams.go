// Package streams reads a table's DynamoDB stream (DynamoDB Local's real
// one) and hands its records to a Lambda stream handler the way the event
// source mapping does: in order per shard, in batches, retrying from the
// first record the handler reports as failed (the whole batch after a
// function error) with a backoff, and, like the mapping's on-failure
// destination, setting a batch aside when its retries or its records' age
// limit run out, then going on.
package streams

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Handler is a Lambda DynamoDB stream handler with batch item failures.
type Handler func(context.Context, lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error)

// Reader polls one table's stream.
type Reader struct {
	DB      *dynamodb.Client
	Streams *dynamodbstreams.Client
	Table   string
	// StreamArn, when set, is the stream read (Table is then not described:
	// the end-to-end suite reads as the publisher's role, which may only
	// read the stream, as the event source mapping does).
	StreamArn string
	Handle    Handler
	Log       *slog.Logger
	Poll      time.Duration // wait when a shard has nothing new (default 100 ms)
	Batch     int32         // records per handler call (default 100, as the stack)

	// RetryAttempts is the mapping's MaximumRetryAttempts: how often a
	// failing batch is retried before it is set aside. 0 means the stack's
	// default, Unlimited (-1): until MaxRecordAge.
	RetryAttempts int
	// MaxRecordAge is the mapping's MaximumRecordAgeInSeconds: records older
	// are set aside instead of handled (0: no limit).
	MaxRecordAge time.Duration
	// Backoff is the wait before the first retry of a batch; it doubles per
	// retry up to MaxBackoff (defaults 500 ms and 5 s).
	Backoff, MaxBackoff time.Duration
	// Now is the reader's clock for record ages (default time.Now; the
	// end-to-end suite moves it forward to age records out).
	Now func() time.Time
	// SetAside receives what the mapping would send to its on-failure
	// destination (nil: it is only logged).
	SetAside func(context.Context, OnFailure)

	idle atomic.Int64 // passes that found nothing new in any shard
}

// Unlimited retries: until the records' age limit.
const Unlimited = -1

// OnFailure is what the mapping's on-failure destination receives about a
// batch it gave up on (the shape of Lambda's invocation record for stream
// sources): where the records were, never the records.
type OnFailure struct {
	Condition              string    `json:"condition"` // RetryAttemptsExhausted or RecordAgeExceeded
	ApproximateInvokeCount int       `json:"approximateInvokeCount"`
	BatchInfo              BatchInfo `json:"DDBStreamBatchInfo"`
	Timestamp              string    `json:"timestamp"`
}

// BatchInfo locates a batch in the stream.
type BatchInfo struct {
	ShardID                         string `json:"shardId"`
	StartSequenceNumber             string `json:"startSequenceNumber"`
	EndSequenceNumber               string `json:"endSequenceNumber"`
	ApproximateArrivalOfFirstRecord string `json:"approximateArrivalOfFirstRecord"`
	ApproximateArrivalOfLastRecord  string `json:"approximateArrivalOfLastRecord"`
	BatchSize                       int    `json:"batchSize"`
	StreamArn                       string `json:"streamArn"`
}

// DeadLetters keeps what was set aside, locally: the on-failure queue of
// make run, at GET /_local/dead-letters.
type DeadLetters struct {
	mu    sync.Mutex
	items []json.RawMessage
}

// Add keeps v as JSON.
func (d *DeadLetters) Add(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.items = append(d.items, b)
	return nil
}

// List returns what was set aside, oldest first.
func (d *DeadLetters) List() []json.RawMessage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]json.RawMessage{}, d.items...)
}

// Handler serves the list as a JSON array.
func (d *DeadLetters) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d.List())
	})
}

// Run reads until ctx ends.
func (r *Reader) Run(ctx context.Context) error {
	if r.Poll == 0 {
		r.Poll = 100 * time.Millisecond
	}
	if r.Batch == 0 {
		r.Batch = 100
	}
	if r.RetryAttempts == 0 {
		r.RetryAttempts = Unlimited
	}
	if r.Backoff == 0 {
		r.Backoff = 500 * time.Millisecond
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = 5 * time.Second
	}
	arn := aws.String(r.StreamArn)
	if r.StreamArn == "" {
		t, err := r.DB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &r.Table})
		if err != nil {
			return err
		}
		if t.Table.LatestStreamArn == nil {
			return errors.New("streams: the table has no stream")
		}
		arn = t.Table.LatestStreamArn
	}
	iters := map[string]*string{} // open shard → next iterator
	after := map[string]string{}  // shard → the last record read from it
	done := map[string]bool{}
	for ctx.Err() == nil {
		desc, err := r.Streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: arn})
		if err != nil {
			r.wait(ctx, time.Second)
			continue
		}
		// failed: a shard could not be opened or read in this pass, so the
		// pass has not shown that nothing new is left (CaughtUp).
		failed := false
		for _, sh := range desc.StreamDescription.Shards {
			id := aws.ToString(sh.ShardId)
			parentDone := sh.ParentShardId == nil || done[*sh.ParentShardId] || !known(desc.StreamDescription.Shards, *sh.ParentShardId)
			if done[id] || iters[id] != nil || !parentDone {
				continue
			}
			in := &dynamodbstreams.GetShardIteratorInput{StreamArn: arn, ShardId: sh.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon}
			if seq := after[id]; seq != "" { // reopened: on from the last record read
				in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(seq)
			}
			it, err := r.Streams.GetShardIterator(ctx, in)
			var trimmed *types.TrimmedDataAccessException
			switch {
			case err == nil:
				iters[id] = it.ShardIterator
			case errors.As(err, &trimmed) && after[id] != "":
				// The records after the last one read are gone: what is
				// left of the shard is read from its oldest record.
				r.Log.Error("stream records trimmed before they were read", "shard", id, "after", after[id])
				delete(after, id)
				failed = true
			default:
				failed = true // asked again next pass
			}
		}
		busy := false
		for id, it := range iters {
			next, last, err := r.shard(ctx, arn, id, it)
			got := last != ""
			if got {
				after[id] = last
			}
			var trimmed *types.TrimmedDataAccessException
			switch {
			case err != nil && ctx.Err() != nil: // stopping: nothing failed
				return ctx.Err()
			case errors.As(err, &trimmed):
				// The iterator is dead (DynamoDB Local trims one now and
				// then under load): a new one is asked for next pass, after
				// the last record read.
				failed = true
				delete(iters, id)
				r.Log.Warn("stream iterator trimmed; reopening the shard", "shard", id, "after", after[id])
			case err != nil:
				failed = true
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
			if !failed {
				r.idle.Add(1)
			}
			r.wait(ctx, r.Poll)
		}
	}
	return ctx.Err()
}

// CaughtUp returns once the reader has gone through every shard and found
// nothing new, in a pass that began after the call and read every shard
// (a pass in which a read failed does not count): every record written
// before the call has then been handled or set aside. It returns ctx's error
// if ctx ends first (a reader that is not running never catches up).
func (r *Reader) CaughtUp(ctx context.Context) error {
	// The pass under way may have read a shard before the call: the one
	// after it began after the call, and is idle only once all is handled.
	want := r.idle.Load() + 2
	for r.idle.Load() < want {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// shard reads one batch of a shard and runs the handler on it until the
// handler accepts every record, as Lambda retries a batch from its first
// failed record (the whole batch after a function error), waiting longer
// after each failure; records past the age limit, or the rest of a batch
// past its retries, are set aside and the shard goes on. It returns the
// next iterator (nil when the shard closed) and the sequence number of the
// batch's last record ("" when it had none).
func (r *Reader) shard(ctx context.Context, arn *string, shardID string, it *string) (*string, string, error) {
	var raw rawRecords
	out, err := r.Streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it, Limit: aws.Int32(r.Batch)}, raw.capture)
	if err != nil {
		return it, "", err
	}
	recs := out.Records
	images, err := raw.images(len(recs))
	if err != nil {
		return it, "", err
	}
	for invokes := 0; len(recs) > 0 && ctx.Err() == nil; {
		if n := r.tooOld(recs); n > 0 {
			r.setAside(ctx, "RecordAgeExceeded", invokes, shardID, aws.ToString(arn), recs[:n])
			recs = recs[n:]
			continue
		}
		ev := lambdaevents.DynamoDBEvent{Records: make([]lambdaevents.DynamoDBEventRecord, len(recs))}
		skip := len(out.Records) - len(recs)
		for i, rec := range recs {
			ev.Records[i] = convert(rec, aws.ToString(arn))
			ev.Records[i].Change.Keys, ev.Records[i].Change.NewImage, ev.Records[i].Change.OldImage =
				images[skip+i].Keys, images[skip+i].NewImage, images[skip+i].OldImage
		}
		resp, err := r.Handle(ctx, ev)
		invokes++
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
		recs = recs[from:]
		if r.RetryAttempts >= 0 && invokes > r.RetryAttempts {
			r.setAside(ctx, "RetryAttemptsExhausted", invokes, shardID, aws.ToString(arn), recs)
			break
		}
		wait := min(r.MaxBackoff, r.Backoff<<min(invokes-1, 20))
		msg := "stream batch not fully processed; retrying"
		if err != nil {
			msg = "stream handler failed; retrying the batch"
		}
		r.Log.Warn(msg, "shard", shardID, "from", from, "records", len(recs), "retry", invokes, "in", wait.String())
		r.wait(ctx, wait)
	}
	last := ""
	if n := len(out.Records); n > 0 {
		last = aws.ToString(out.Records[n-1].Dynamodb.SequenceNumber)
	}
	return out.NextShardIterator, last, nil
}

// tooOld returns how many leading records are past MaxRecordAge.
func (r *Reader) tooOld(recs []types.Record) int {
	if r.MaxRecordAge <= 0 {
		return 0
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	n := 0
	for n < len(recs) && recs[n].Dynamodb != nil && recs[n].Dynamodb.ApproximateCreationDateTime != nil &&
		now().Sub(*recs[n].Dynamodb.ApproximateCreationDateTime) > r.MaxRecordAge {
		n++
	}
	return n
}

func (r *Reader) setAside(ctx context.Context, condition string, invokes int, shardID, arn string, recs []types.Record) {
	first, last := recs[0].Dynamodb, recs[len(recs)-1].Dynamodb
	at := func(d *types.StreamRecord) string {
		if d == nil || d.ApproximateCreationDateTime == nil {
			return ""
		}
		return d.ApproximateCreationDateTime.UTC().Format(time.RFC3339)
	}
	f := OnFailure{Condition: condition, ApproximateInvokeCount: invokes, Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
		BatchInfo: BatchInfo{ShardID: shardID, StartSequenceNumber: aws.ToString(first.SequenceNumber), EndSequenceNumber: aws.ToString(last.SequenceNumber),
			ApproximateArrivalOfFirstRecord: at(first), ApproximateArrivalOfLastRecord: at(last), BatchSize: len(recs), StreamArn: arn}}
	r.Log.Error("stream records set aside", "condition", condition, "shard", shardID, "records", len(recs),
		"startSequenceNumber", f.BatchInfo.StartSequenceNumber, "endSequenceNumber", f.BatchInfo.EndSequenceNumber)
	if r.SetAside != nil {
		r.SetAside(ctx, f)
	}
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

// rawRecords keeps the JSON of a GetRecords answer, whose images are read
// the way Lambda reads them into an event (aws-lambda-go's decoder), once
// DynamoDB Local's rendering of an empty map attribute is mended: it sends
// {} where DynamoDB sends {"M":{}}, and the SDK's decoder then shows that
// attribute with another attribute's value.
type rawRecords struct{ body []byte }

func (r *rawRecords) capture(o *dynamodbstreams.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("exactonceRawRecords",
			func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleDeserialize(ctx, in)
				if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && err == nil && resp.StatusCode == 200 {
					// The answer is closed here: the SDK closes only what it
					// is given back (a client timeout holds an unclosed one).
					body := resp.Body
					r.body, err = io.ReadAll(body)
					_ = body.Close()
					resp.Body = io.NopCloser(bytes.NewReader(r.body))
				}
				return out, md, err
			}), middleware.After)
	})
}

// images returns the n records' keys and images from the raw answer.
func (r *rawRecords) images(n int) ([]lambdaevents.DynamoDBStreamRecord, error) {
	var doc struct {
		Records []struct {
			Change map[string]json.RawMessage `json:"dynamodb"`
		}
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		return nil, fmt.Errorf("streams: reading the records' images: %w", err)
	}
	if len(doc.Records) != n {
		return nil, fmt.Errorf("streams: %d records' images for %d records", len(doc.Records), n)
	}
	out := make([]lambdaevents.DynamoDBStreamRecord, n)
	for i, rec := range doc.Records {
		for _, name := range []string{"Keys", "NewImage", "OldImage"} {
			var img map[string]any
			if raw, ok := rec.Change[name]; ok && json.Unmarshal(raw, &img) == nil {
				for k, v := range img {
					img[k] = mend(v)
				}
				rec.Change[name], _ = json.Marshal(img)
			}
		}
		b, _ := json.Marshal(rec.Change)
		if err := json.Unmarshal(b, &out[i]); err != nil {
			return nil, fmt.Errorf("streams: reading the records' images: %w", err)
		}
	}
	return out, nil
}

// mend turns an empty attribute value ({}) into the empty map it stands
// for, in nested maps and lists too.
func mend(v any) any {
	av, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if len(av) == 0 {
		return map[string]any{"M": map[string]any{}}
	}
	if m, ok := av["M"].(map[string]any); ok {
		for k, e := range m {
			m[k] = mend(e)
		}
	}
	if l, ok := av["L"].([]any); ok {
		for k, e := range l {
			l[k] = mend(e)
		}
	}
	return av
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
