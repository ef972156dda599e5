package publish

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/exactonce/exactonce/shared/telemetry"
)

// PutEvents limits.
const (
	MaxBatchEntries = 10
	MaxBatchBytes   = 256 * 1024
)

// Publisher publishes the events of stream records to an EventBridge bus.
type Publisher struct {
	eb     *eventbridge.Client
	bus    string
	source string
	log    *slog.Logger
	// Attempts is how many times one batch is tried (the first call plus
	// retries of its failed entries); Backoff caps the wait between them.
	Attempts int
	Backoff  time.Duration
	sleep    func(context.Context, time.Duration) error
	// Metrics receives EventsPublished, EntriesRetried and
	// BatchItemFailures per invocation (nil: none).
	Metrics *telemetry.Metrics
}

// New returns a Publisher to bus with the given event source.
func New(eb *eventbridge.Client, bus, source string, log *slog.Logger) *Publisher {
	return &Publisher{eb: eb, bus: bus, source: source, log: log, Attempts: 6, Backoff: 2 * time.Second, sleep: sleepCtx}
}

// pending is an event still to be accepted, with the record it came from.
type pending struct {
	record int // index in the batch of stream records
	entry  ebtypes.PutEventsRequestEntry
	size   int
}

// Handle is the Lambda handler for the stream. It publishes every record's
// event in stream order and, if some event is still not accepted after the
// retries, reports the earliest such record as the batch item failure, so
// Lambda retries from there: nothing is skipped, and events already
// accepted may be published again with the same eventId (subscribers
// de-duplicate). It never reports success for an event not accepted.
func (p *Publisher) Handle(ctx context.Context, ev lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error) {
	var published, retried int
	resp := p.handle(ctx, ev, &published, &retried)
	p.Metrics.Emit([]telemetry.Dim{{Name: "Function", Value: "publisher"}},
		telemetry.Value{Name: "EventsPublished", Unit: telemetry.Count, Value: float64(published)},
		telemetry.Value{Name: "EntriesRetried", Unit: telemetry.Count, Value: float64(retried)},
		telemetry.Value{Name: "BatchItemFailures", Unit: telemetry.Count, Value: float64(len(resp.BatchItemFailures))})
	return resp, nil
}

func (p *Publisher) handle(ctx context.Context, ev lambdaevents.DynamoDBEvent, published, retried *int) lambdaevents.DynamoDBEventResponse {
	var todo []pending
	for i, rec := range ev.Records {
		e, err := Derive(rec)
		if err != nil {
			// A record we cannot read is not skipped: retried, then sent to the
			// on-failure queue by the event source mapping.
			p.log.Error("undecodable stream record", "eventID", rec.EventID, "error", err.Error())
			return failAt(ev, i)
		}
		if e == nil {
			continue
		}
		entry := ebtypes.PutEventsRequestEntry{
			EventBusName: aws.String(p.bus),
			Source:       aws.String(p.source),
			DetailType:   aws.String(e.DetailType),
			Detail:       aws.String(string(e.Detail)),
			Resources:    []string{},
		}
		todo = append(todo, pending{record: i, entry: entry, size: entrySize(entry)})
	}
	for len(todo) > 0 {
		n, bytes := 0, 0
		for n < len(todo) && n < MaxBatchEntries && bytes+todo[n].size <= MaxBatchBytes {
			bytes += todo[n].size
			n++
		}
		if n == 0 {
			n = 1 // a single oversize entry: let PutEvents reject it rather than loop
		}
		failed := p.putWithRetries(ctx, todo[:n], retried)
		*published += n - len(failed)
		if len(failed) > 0 {
			return failAt(ev, failed[0].record)
		}
		todo = todo[n:]
	}
	return lambdaevents.DynamoDBEventResponse{BatchItemFailures: []lambdaevents.DynamoDBBatchItemFailure{}}
}

// putWithRetries sends one batch and retries only its failed entries with
// capped exponential backoff and full jitter. It returns what still failed,
// in record order.
func (p *Publisher) putWithRetries(ctx context.Context, batch []pending, retried *int) []pending {
	for attempt := 0; ; attempt++ {
		entries := make([]ebtypes.PutEventsRequestEntry, len(batch))
		for i, b := range batch {
			entries[i] = b.entry
		}
		out, err := p.eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
		var failed []pending
		switch {
		case err != nil:
			p.log.Warn("PutEvents failed", "entries", len(batch), "attempt", attempt+1, "error", err.Error())
			failed = batch
		case out.FailedEntryCount > 0 || len(out.Entries) != len(batch):
			for i, b := range batch {
				if i >= len(out.Entries) || out.Entries[i].EventId == nil || out.Entries[i].ErrorCode != nil {
					failed = append(failed, b)
				}
			}
			p.log.Warn("PutEvents partial failure", "failed", len(failed), "entries", len(batch), "attempt", attempt+1)
		}
		if len(failed) == 0 || attempt+1 >= p.Attempts {
			return failed
		}
		batch = failed
		*retried += len(failed)
		wait := min(p.Backoff, 50*time.Millisecond<<attempt)
		if err := p.sleep(ctx, rand.N(wait+1)); err != nil {
			return batch
		}
	}
}

// failAt reports record i (and so everything after it) as not processed.
func failAt(ev lambdaevents.DynamoDBEvent, i int) lambdaevents.DynamoDBEventResponse {
	return lambdaevents.DynamoDBEventResponse{BatchItemFailures: []lambdaevents.DynamoDBBatchItemFailure{
		{ItemIdentifier: ev.Records[i].Change.SequenceNumber},
	}}
}

// entrySize is EventBridge's size of an entry: source, detail-type, detail,
// resources, and 14 bytes for the time.
func entrySize(e ebtypes.PutEventsRequestEntry) int {
	n := len(aws.ToString(e.Source)) + len(aws.ToString(e.DetailType)) + len(aws.ToString(e.Detail)) + 14
	for _, r := range e.Resources {
		n += len(r)
	}
	return n
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
