package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/exactonce/exactonce/internal/backoff"
	"github.com/exactonce/exactonce/shared/telemetry"
)

// PutEvents limits.
const (
	MaxBatchEntries = 10
	MaxBatchBytes   = 256 * 1024
)

// Metrics the publisher emits (namespace telemetry.Namespace, one dimension
// DimFunction=FunctionName). The stack's alarms and dashboard use these
// constants, so an alarm always watches a metric the code emits.
const (
	DimFunction  = "Function"
	FunctionName = "publisher"

	MetricEventsPublished   = "EventsPublished"   // entries EventBridge accepted
	MetricEntriesRetried    = "EntriesRetried"    // entries re-sent within an invocation
	MetricEntriesFailed     = "EntriesFailed"     // entries not accepted when the invocation gave up: publishing is failing
	MetricBatchItemFailures = "BatchItemFailures" // undecodable records reported for a retry
	MetricRecordsSetAside   = "RecordsSetAside"   // undecodable records set aside (on the on-failure queue)
)

// ErrPublishing is returned (a function error) when EventBridge did not
// accept every event of a batch after the retries: the event source mapping
// then retries the same batch from its start, in order, until the records'
// age limit, instead of counting a batch item failure per attempt.
var ErrPublishing = errors.New("publish: EventBridge did not accept every event")

// The event source mapping's limits, set by the stack and mirrored by the
// local stream reader. Retries are unlimited, so a batch that fails because
// EventBridge does is retried (in order) until its records are
// MappingMaxRecordAge old: an outage is a delay. The age limit is an hour
// under the stream's 24 h retention so that a record given up on is
// reported to the on-failure queue (and its alarm) while its sequence
// number still means something; republish then rebuilds its event.
const (
	MappingRetryAttempts = -1
	MappingMaxRecordAge  = 23 * time.Hour
)

// Defaults for undecodable (poison) records.
const (
	DefaultPoisonAttempts = 3
	DefaultPoisonMaxAge   = 5 * time.Minute
)

// Publisher publishes the events of stream records to an EventBridge bus.
type Publisher struct {
	eb     *eventbridge.Client
	bus    string
	source string
	log    *slog.Logger
	// Attempts is how many times one batch is tried (the first call plus
	// retries of its failed entries); Backoff caps the wait between them.
	// Together they pace an invocation during an EventBridge outage (10-30
	// s of trying, SDK retries included, before the function error), so the mapping's retries
	// are not spent in a hot loop.
	Attempts int
	Backoff  time.Duration
	sleep    func(context.Context, time.Duration) error
	// Metrics receives the Metric* values per invocation (nil: none).
	Metrics *telemetry.Metrics

	// SetAside receives an undecodable record once it has been reported
	// PoisonAttempts times by this instance, or once it is PoisonMaxAge
	// old (a new instance has no count). nil: never set aside; the record
	// is reported until the mapping's own limits discard it.
	SetAside       func(context.Context, Aside) error
	PoisonAttempts int
	PoisonMaxAge   time.Duration
	now            func() time.Time

	// Uses reads what use events need beyond their gate's stream record
	// (the table: the action, the take's record).
	Uses UseReader

	mu       sync.Mutex
	reported map[string]int // sequence number → times reported undecodable
}

// Aside is what is kept of a record set aside (undecodable, or whose event
// EventBridge refused for good): enough to find and fix the item (its keys,
// where it was in the stream, when, why), never its images (they hold the
// encrypted payload and the PIN hash). A refused event is kept whole (its
// detail carries none of those).
type Aside struct {
	Reason                  string            `json:"reason"`
	EventSourceARN          string            `json:"eventSourceArn,omitempty"`
	EventID                 string            `json:"eventId"`
	EventName               string            `json:"eventName"`
	Keys                    map[string]string `json:"keys"`
	SequenceNumber          string            `json:"sequenceNumber"`
	ApproximateCreationTime string            `json:"approximateCreationTime"`
	Error                   string            `json:"error"`
	// ErrorCode and Event: an event EventBridge refused with a
	// non-retryable code (see Retryable), and that event.
	ErrorCode  string      `json:"errorCode,omitempty"`
	Event      *AsideEvent `json:"event,omitempty"`
	Attempts   int         `json:"attempts"`
	SetAsideAt string      `json:"setAsideAt"`
}

// AsideEvent is an event EventBridge refused, as it was sent.
type AsideEvent struct {
	EventBusName string `json:"eventBusName"`
	Source       string `json:"source"`
	DetailType   string `json:"detailType"`
	Detail       string `json:"detail"`
}

// Retryable reports whether EventBridge documents a PutEvents entry's
// ErrorCode as retryable (InternalFailure, ThrottlingException; an entry
// without a code). Every other code (AccessDeniedException, MalformedDetail,
// InvalidArgument, NotAuthorizedForSourceException, …) fails again however
// often it is sent: its record is set aside, not retried.
func Retryable(code string) bool {
	return code == "" || code == "InternalFailure" || code == "ThrottlingException"
}

// refusal is an entry EventBridge refused with a non-retryable code.
type refusal struct {
	pending
	code, message string
}

// New returns a Publisher to bus with the given event source.
func New(eb *eventbridge.Client, bus, source string, log *slog.Logger) *Publisher {
	return &Publisher{eb: eb, bus: bus, source: source, log: log, Attempts: 8, Backoff: 4 * time.Second, sleep: backoff.Sleep,
		PoisonAttempts: DefaultPoisonAttempts, PoisonMaxAge: DefaultPoisonMaxAge, now: time.Now}
}

// pending is an event still to be accepted, with the record it came from.
type pending struct {
	record int // index in the batch of stream records
	entry  ebtypes.PutEventsRequestEntry
	size   int
}

// stats are one invocation's counts, emitted as metrics, and the entries
// refused for good.
type stats struct {
	published, retried, failed, reported, setAside int
	refused                                        []refusal
}

// Handle is the Lambda handler for the stream (ReportBatchItemFailures on).
//
// Every decodable record's event is published before Handle returns, in
// stream order. That matters because of how Lambda reads the answer: a
// batch item failure for record i checkpoints everything before i and
// retries from i. So:
//   - an undecodable record never holds back the others: the events of the
//     records before it are published now (they are checkpointed), and so
//     are those after it (they come again in the retry, with the same event
//     ids, which subscribers de-duplicate). Only that record is reported;
//     after PoisonAttempts reports (or PoisonMaxAge) it is set aside with
//     its context (SetAside: the on-failure queue) and the batch succeeds.
//   - when EventBridge does not accept every event after the retries, Handle
//     returns ErrPublishing, a function error: the mapping retries the whole
//     batch, in order, until the record age limit (an outage is a delay up to
//     the stream's retention), and the Errors alarm sees it. Reporting a
//     batch item failure instead would spend one of the mapping's retries
//     per invocation, emptying the stream into the on-failure queue within
//     minutes.
//
// It never reports success for an event not accepted.
func (p *Publisher) Handle(ctx context.Context, ev lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error) {
	var st stats
	resp, err := p.handle(ctx, ev, &st)
	p.Metrics.Emit([]telemetry.Dim{{Name: DimFunction, Value: FunctionName}},
		telemetry.Value{Name: MetricEventsPublished, Unit: telemetry.Count, Value: float64(st.published)},
		telemetry.Value{Name: MetricEntriesRetried, Unit: telemetry.Count, Value: float64(st.retried)},
		telemetry.Value{Name: MetricEntriesFailed, Unit: telemetry.Count, Value: float64(st.failed)},
		telemetry.Value{Name: MetricBatchItemFailures, Unit: telemetry.Count, Value: float64(st.reported)},
		telemetry.Value{Name: MetricRecordsSetAside, Unit: telemetry.Count, Value: float64(st.setAside)})
	return resp, err
}

func (p *Publisher) handle(ctx context.Context, ev lambdaevents.DynamoDBEvent, st *stats) (lambdaevents.DynamoDBEventResponse, error) {
	ok := lambdaevents.DynamoDBEventResponse{BatchItemFailures: []lambdaevents.DynamoDBBatchItemFailure{}}
	var todo []pending
	var poison []int
	var poisonErr []error
	uses := map[int][]UseChange{}
	var changes []UseChange
	for i, rec := range ev.Records {
		cs, err := DeriveUses(rec)
		if err == nil && len(cs) > 0 {
			uses[i] = cs
			changes = append(changes, cs...)
			continue
		}
		var e *Entry
		if err == nil {
			e, err = Derive(rec)
		}
		if err != nil {
			p.log.Error("undecodable stream record", "eventID", rec.EventID, "sequenceNumber", rec.Change.SequenceNumber, "error", err.Error())
			poison, poisonErr = append(poison, i), append(poisonErr, err)
			continue
		}
		if e != nil {
			todo = append(todo, p.pending(i, e))
		}
	}
	if len(changes) > 0 {
		// One read for the batch's use events; a record whose action or
		// take record is gone, another action's or undecodable is
		// undecodable like any other.
		var entries []*Entry
		var err error
		if p.Uses == nil {
			err = errors.New("publish: no UseReader to read use events with")
		} else {
			entries, err = UseEntries(ctx, p.Uses, changes)
		}
		var unreadable *UnreadableError
		switch {
		case errors.As(err, &unreadable) || p.Uses == nil:
			// Find the records concerned one by one.
			for _, i := range slices.Sorted(maps.Keys(uses)) {
				es, err := UseEntries(ctx, p.Uses, uses[i])
				if err != nil && !errors.As(err, &unreadable) || p.Uses == nil {
					return ok, fmt.Errorf("%w: reading use events: %w", ErrPublishing, err)
				}
				if err != nil {
					p.log.Error("undecodable stream record", "eventID", ev.Records[i].EventID, "sequenceNumber", ev.Records[i].Change.SequenceNumber, "error", err.Error())
					poison, poisonErr = append(poison, i), append(poisonErr, err)
					continue
				}
				for _, e := range es {
					todo = append(todo, p.pending(i, e))
				}
			}
		case err != nil:
			return ok, fmt.Errorf("%w: reading use events: %w", ErrPublishing, err)
		default:
			k := 0
			for i := range ev.Records {
				for range uses[i] {
					todo = append(todo, p.pending(i, entries[k]))
					k++
				}
			}
		}
		slices.SortStableFunc(todo, func(x, y pending) int { return x.record - y.record })
		order := make([]int, len(poison))
		for k := range order {
			order[k] = k
		}
		slices.SortFunc(order, func(x, y int) int { return poison[x] - poison[y] })
		sortedPoison, sortedErr := make([]int, len(poison)), make([]error, len(poison))
		for k, o := range order {
			sortedPoison[k], sortedErr[k] = poison[o], poisonErr[o]
		}
		poison, poisonErr = sortedPoison, sortedErr
	}
	if err := p.publish(ctx, todo, st); err != nil {
		return ok, err
	}
	// Events EventBridge refused for good hold back their records like
	// undecodable ones: in record order with them.
	refusedAt := map[int]refusal{}
	for _, r := range st.refused {
		refusedAt[r.record] = r
		poison, poisonErr = append(poison, r.record), append(poisonErr, fmt.Errorf("EventBridge refused the event: %s: %s", r.code, r.message))
	}
	if len(st.refused) > 0 {
		order := make([]int, len(poison))
		for k := range order {
			order[k] = k
		}
		sort.SliceStable(order, func(a, b int) bool { return poison[order[a]] < poison[order[b]] })
		p2, e2 := make([]int, len(poison)), make([]error, len(poison))
		for k, o := range order {
			p2[k], e2[k] = poison[o], poisonErr[o]
		}
		poison, poisonErr = p2, e2
	}
	// Everything else is published; now the poison records, in order: set
	// aside those retried enough, report the first of the others.
	for k, i := range poison {
		rec := ev.Records[i]
		n := p.report(rec.Change.SequenceNumber)
		if !p.dueAside(rec, n) {
			st.reported++
			return lambdaevents.DynamoDBEventResponse{BatchItemFailures: []lambdaevents.DynamoDBBatchItemFailure{
				{ItemIdentifier: rec.Change.SequenceNumber},
			}}, nil
		}
		a := p.aside(rec, poisonErr[k], n)
		if r, ok := refusedAt[i]; ok {
			a.Reason, a.ErrorCode = "event refused by EventBridge (non-retryable)", r.code
			a.Event = &AsideEvent{EventBusName: aws.ToString(r.entry.EventBusName), Source: aws.ToString(r.entry.Source),
				DetailType: aws.ToString(r.entry.DetailType), Detail: aws.ToString(r.entry.Detail)}
		}
		if err := p.SetAside(ctx, a); err != nil {
			// Not set aside: report it, so it is retried (and set aside then).
			p.log.Error("could not set aside an undecodable record", "sequenceNumber", a.SequenceNumber, "error", err.Error())
			st.reported++
			return lambdaevents.DynamoDBEventResponse{BatchItemFailures: []lambdaevents.DynamoDBBatchItemFailure{
				{ItemIdentifier: rec.Change.SequenceNumber},
			}}, nil
		}
		p.forget(rec.Change.SequenceNumber)
		st.setAside++
		p.log.Error("stream record set aside", "reason", a.Reason, "sequenceNumber", a.SequenceNumber, "keys", a.Keys, "errorCode", a.ErrorCode, "attempts", n)
	}
	return ok, nil
}

// report counts one more report of an undecodable record and returns the count.
func (p *Publisher) report(seq string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reported == nil || len(p.reported) > 10_000 {
		p.reported = map[string]int{}
	}
	p.reported[seq]++
	return p.reported[seq]
}

func (p *Publisher) forget(seq string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.reported, seq)
}

// dueAside reports whether an undecodable record reported n times (by this
// instance) is to be set aside now rather than retried.
func (p *Publisher) dueAside(rec lambdaevents.DynamoDBEventRecord, n int) bool {
	if p.SetAside == nil {
		return false
	}
	if n >= max(p.PoisonAttempts, 1) {
		return true
	}
	at := rec.Change.ApproximateCreationDateTime.Time
	return p.PoisonMaxAge > 0 && !at.IsZero() && p.now().Sub(at) >= p.PoisonMaxAge
}

func (p *Publisher) aside(rec lambdaevents.DynamoDBEventRecord, err error, n int) Aside {
	keys := make(map[string]string, len(rec.Change.Keys))
	for k, v := range rec.Change.Keys {
		switch v.DataType() {
		case lambdaevents.DataTypeString:
			keys[k] = v.String()
		case lambdaevents.DataTypeNumber:
			keys[k] = v.Number()
		}
	}
	var at string
	if t := rec.Change.ApproximateCreationDateTime.Time; !t.IsZero() {
		at = t.UTC().Format(time.RFC3339)
	}
	return Aside{
		Reason: "undecodable stream record", EventSourceARN: rec.EventSourceArn, EventID: rec.EventID, EventName: rec.EventName,
		Keys: keys, SequenceNumber: rec.Change.SequenceNumber, ApproximateCreationTime: at, Error: err.Error(), Attempts: n,
		SetAsideAt: p.now().UTC().Format(time.RFC3339),
	}
}

// Publish sends entries in order, batched, with the retries; it returns how
// many were accepted and, if not all, an error wrapping ErrPublishing. The
// stream handler and the republish command share it.
func (p *Publisher) Publish(ctx context.Context, entries []*Entry) (int, error) {
	todo := make([]pending, len(entries))
	for i, e := range entries {
		todo[i] = p.pending(i, e)
	}
	var st stats
	err := p.publish(ctx, todo, &st)
	if err == nil && len(st.refused) > 0 {
		r := st.refused[0]
		err = fmt.Errorf("%w: %d refused for good (first: %s: %s)", ErrPublishing, len(st.refused), r.code, r.message)
	}
	return st.published, err
}

func (p *Publisher) pending(record int, e *Entry) pending {
	entry := ebtypes.PutEventsRequestEntry{
		EventBusName: aws.String(p.bus),
		Source:       aws.String(p.source),
		DetailType:   aws.String(e.DetailType),
		Detail:       aws.String(string(e.Detail)),
		Resources:    []string{},
	}
	return pending{record: record, entry: entry, size: entrySize(entry)}
}

// publish sends todo in batches, in order, and stops at the first batch
// that still fails after its retries (later ones would only fail too, and
// must not overtake it).
func (p *Publisher) publish(ctx context.Context, todo []pending, st *stats) error {
	total := len(todo)
	for len(todo) > 0 {
		n, bytes := 0, 0
		for n < len(todo) && n < MaxBatchEntries && bytes+todo[n].size <= MaxBatchBytes {
			bytes += todo[n].size
			n++
		}
		if n == 0 {
			n = 1 // a single oversize entry: let PutEvents reject it rather than loop
		}
		failed, refused, lastErr := p.putWithRetries(ctx, todo[:n], &st.retried)
		st.refused = append(st.refused, refused...)
		st.published += n - len(failed) - len(refused)
		if len(failed) > 0 {
			st.failed += len(todo) - (n - len(failed))
			return fmt.Errorf("%w: %d of %d not accepted after %d attempts (last: %v)", ErrPublishing, st.failed, total, p.Attempts, lastErr)
		}
		todo = todo[n:]
	}
	return nil
}

// putWithRetries sends one batch and retries only its entries that failed
// with a retryable code, with capped exponential backoff and full jitter.
// It returns what still failed, in record order, the entries refused with
// a non-retryable code (never retried), and the last failure seen.
func (p *Publisher) putWithRetries(ctx context.Context, batch []pending, retried *int) ([]pending, []refusal, error) {
	var last error
	var refused []refusal
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
			failed, last = batch, err
		case out.FailedEntryCount > 0 || len(out.Entries) != len(batch):
			code := ""
			for i, b := range batch {
				if i >= len(out.Entries) || out.Entries[i].EventId == nil || out.Entries[i].ErrorCode != nil {
					c := ""
					if i < len(out.Entries) {
						c = aws.ToString(out.Entries[i].ErrorCode)
					}
					if !Retryable(c) {
						refused = append(refused, refusal{pending: b, code: c, message: aws.ToString(out.Entries[i].ErrorMessage)})
						continue
					}
					failed = append(failed, b)
					if code == "" {
						code = c
					}
				}
			}
			last = fmt.Errorf("%d entries rejected (%s)", len(failed), code)
			p.log.Warn("PutEvents partial failure", "failed", len(failed), "refused", len(refused), "entries", len(batch), "attempt", attempt+1, "errorCode", code)
		}
		if len(failed) == 0 || attempt+1 >= p.Attempts {
			return failed, refused, last
		}
		batch = failed
		*retried += len(failed)
		wait := min(p.Backoff, 50*time.Millisecond<<attempt)
		if err := p.sleep(ctx, rand.N(wait+1)); err != nil {
			return batch, refused, err
		}
	}
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
