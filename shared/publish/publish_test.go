package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/telemetry"
)

type img = map[string]lambdaevents.DynamoDBAttributeValue

func str(v string) lambdaevents.DynamoDBAttributeValue { return lambdaevents.NewStringAttribute(v) }
func num(v int64) lambdaevents.DynamoDBAttributeValue {
	return lambdaevents.NewNumberAttribute(fmt.Sprint(v))
}

// base is an open action's image, with extra attributes.
func base(id string, extra ...any) img {
	m := img{
		"actionId": str(id), "userId": str("u1"), "kind": str("coupon"),
		"activeAtMs": num(1_700_000_000_000), "expiresAtMs": num(1_700_086_400_000),
		"createdAt": str("2023-11-14T22:13:20.000Z"), "ttl": num(1_702_678_400),
		"metadata": lambdaevents.NewMapAttribute(img{"campaign": str("bf")}),
		"payload":  lambdaevents.NewBinaryAttribute([]byte("sealed-secret-bytes")),
		"pinHash":  lambdaevents.NewBinaryAttribute([]byte("hash-bytes")), "pinFailures": num(0), "maxPinAttempts": num(3),
		"consumeKey": str("idem-key-value"),
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1].(lambdaevents.DynamoDBAttributeValue)
	}
	return m
}

func record(name string, old, cur img, ttl bool, seq string) lambdaevents.DynamoDBEventRecord {
	r := lambdaevents.DynamoDBEventRecord{EventName: name, EventID: "ev-" + seq,
		Change: lambdaevents.DynamoDBStreamRecord{OldImage: old, NewImage: cur, SequenceNumber: seq}}
	if ttl {
		r.UserIdentity = &lambdaevents.DynamoDBUserIdentity{Type: "Service", PrincipalID: "dynamodb.amazonaws.com"}
	}
	return r
}

// keyItem is an idempotency key's image (the /keys routes share the table).
var keyItem = img{"actionId": str("key#pay-1"), "fingerprint": str("f"), "token": str("0123"), "attempts": num(1), "ttl": num(1_702_678_400)}

func keyRecord(name string, old, cur img, ttl bool) lambdaevents.DynamoDBEventRecord {
	r := record(name, old, cur, ttl, "99")
	r.Change.Keys = img{"actionId": str("key#pay-1")}
	return r
}

// watermarkRecord is the sweeper's write of its watermarks (no userId: not an action).
func watermarkRecord() lambdaevents.DynamoDBEventRecord {
	r := record("MODIFY", img{"actionId": str(store.WatermarkID), "w0": num(1)}, img{"actionId": str(store.WatermarkID), "w0": num(2)}, false, "98")
	r.Change.Keys = img{"actionId": str(store.WatermarkID)}
	return r
}

func TestDerive(t *testing.T) {
	consumed := base("a", "consumedAt", str("2023-11-14T23:00:00.000Z"), "consumedReason", str("checkout"))
	canceled := base("a", "canceledAt", str("2023-11-14T23:00:00.000Z"), "cancelReason", str("refund"))
	swept := base("a", "expiredAt", str("2023-11-15T22:14:00.000Z"))
	tests := []struct {
		name string
		rec  lambdaevents.DynamoDBEventRecord
		want string // detail type, "" for no event
	}{
		{"create emits nothing", record("INSERT", nil, base("a"), false, "1"), ""},
		{"consume", record("MODIFY", base("a"), consumed, false, "2"), events.TypeConsumed},
		{"cancel", record("MODIFY", base("a"), canceled, false, "3"), events.TypeCanceled},
		{"sweep marks expired", record("MODIFY", base("a"), swept, false, "4"), events.TypeExpired},
		{"wrong PIN counter emits nothing", record("MODIFY", base("a"), base("a", "pinFailures", num(1)), false, "5"), ""},
		{"a later write to a consumed action emits nothing", record("MODIFY", consumed, consumed, false, "6"), ""},
		{"TTL removal of an unfinished action is its expiry", record("REMOVE", base("a"), nil, true, "7"), events.TypeExpired},
		{"TTL removal of a consumed action emits nothing", record("REMOVE", consumed, nil, true, "8"), ""},
		{"TTL removal of a swept action emits nothing", record("REMOVE", swept, nil, true, "9"), ""},
		{"TTL removal of a canceled action emits nothing", record("REMOVE", canceled, nil, true, "10"), ""},
		{"a delete by a user is not an expiry", record("REMOVE", base("a"), nil, false, "11"), ""},
		{"an idempotency key's claim emits nothing", keyRecord("INSERT", nil, keyItem, false), ""},
		{"an idempotency key's complete emits nothing", keyRecord("MODIFY", keyItem, keyItem, false), ""},
		{"TTL removal of an idempotency key emits nothing", keyRecord("REMOVE", keyItem, nil, true), ""},
		{"the sweeper's watermarks emit nothing", watermarkRecord(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Derive(tt.rec)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if e != nil {
				got = e.DetailType
				for _, secret := range []string{"sealed-secret-bytes", "hash-bytes", "idem-key-value", "pinHash", "payload", "c2VhbGVk"} {
					if strings.Contains(string(e.Detail), secret) {
						t.Fatalf("detail leaks %q: %s", secret, e.Detail)
					}
				}
			}
			if got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}

	// Same transition → same id, whoever detects it; other transitions differ.
	sweep, _ := Derive(record("MODIFY", base("a"), swept, false, "1"))
	byTTL, _ := Derive(record("REMOVE", base("a"), nil, true, "2"))
	again, _ := Derive(record("MODIFY", base("a"), swept, false, "3"))
	cons, _ := Derive(record("MODIFY", base("a"), consumed, false, "4"))
	if sweep.EventID != byTTL.EventID || sweep.EventID != again.EventID || cons.EventID == sweep.EventID {
		t.Fatalf("event ids: sweep %s ttl %s again %s consumed %s", sweep.EventID, byTTL.EventID, again.EventID, cons.EventID)
	}
	var d events.Consumed
	if err := json.Unmarshal(cons.Detail, &d); err != nil {
		t.Fatal(err)
	}
	if d.Version != "1" || d.EventID != cons.EventID || d.ActionID != "a" || d.UserID != "u1" || d.Kind != "coupon" ||
		d.ConsumedAt != "2023-11-14T23:00:00.000Z" || d.OccurredAt != d.ConsumedAt || d.Reason != "checkout" || d.Metadata["campaign"] != "bf" {
		t.Fatalf("consumed detail: %+v", d)
	}
}

// fakeEventBridge answers PutEvents. fail decides, per call number and entry,
// whether to reject the entry; status, when not 200, fails the whole call.
type fakeEventBridge struct {
	mu       sync.Mutex
	calls    int
	accepted map[string]int // eventId → times accepted
	order    []string
	fail     func(call, entry int, eventID string) bool
	failCode string // the ErrorCode of a failed entry (default InternalFailure, retryable)
	status   func(call int) int
}

func (f *fakeEventBridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	var in struct{ Entries []struct{ Detail string } }
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &in)
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	if f.status != nil {
		if s := f.status(f.calls); s != 200 {
			w.WriteHeader(s)
			code := "InternalException"
			if s == 400 {
				code = "ThrottlingException"
			}
			fmt.Fprintf(w, `{"__type":"%s","message":"injected"}`, code)
			return
		}
	}
	type res struct {
		EventId   string `json:",omitempty"`
		ErrorCode string `json:",omitempty"`
	}
	out := struct {
		FailedEntryCount int
		Entries          []res
	}{}
	for i, e := range in.Entries {
		var d events.Common
		_ = json.Unmarshal([]byte(e.Detail), &d)
		if f.fail != nil && f.fail(f.calls, i, d.EventID) {
			out.FailedEntryCount++
			code := f.failCode
			if code == "" {
				code = "InternalFailure"
			}
			out.Entries = append(out.Entries, res{ErrorCode: code})
			continue
		}
		f.accepted[d.EventID]++
		f.order = append(f.order, d.EventID)
		out.Entries = append(out.Entries, res{EventId: "eb-" + d.EventID})
	}
	_ = json.NewEncoder(w).Encode(out)
}

func newPublisher(t *testing.T, f *fakeEventBridge) *Publisher {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.accepted = map[string]int{}
	cfg := awsconfig.Local(srv.URL)
	cfg.Retryer = func() aws.Retryer { return retry.AddWithMaxBackoffDelay(retry.NewStandard(), time.Millisecond) }
	p := New(eventbridge.NewFromConfig(cfg), "bus", "exactonce", slog.New(slog.NewJSONHandler(io.Discard, nil)))
	p.sleep = func(context.Context, time.Duration) error { return nil }
	return p
}

// consumes returns n stream records, each an action's consumption.
func consumes(n int) lambdaevents.DynamoDBEvent {
	var ev lambdaevents.DynamoDBEvent
	for i := range n {
		id := fmt.Sprintf("a%03d", i)
		ev.Records = append(ev.Records, record("MODIFY", base(id),
			base(id, "consumedAt", str("2023-11-14T23:00:00.000Z")), false, fmt.Sprintf("%05d", i)))
	}
	return ev
}

func TestPublishHappyPath(t *testing.T) {
	for _, n := range []int{1, 10, 11, 100} {
		f := &fakeEventBridge{}
		resp, err := newPublisher(t, f).Handle(context.Background(), consumes(n))
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("n=%d: %v %+v", n, err, resp)
		}
		if want := (n + 9) / 10; f.calls != want {
			t.Fatalf("n=%d: %d PutEvents calls, want %d", n, f.calls, want)
		}
		if len(f.accepted) != n {
			t.Fatalf("n=%d: %d events accepted", n, len(f.accepted))
		}
	}
}

func TestPublishRetriesOnlyFailedEntries(t *testing.T) {
	// Call 1 rejects entries 2 and 7; call 2 (the retry of those two) rejects the first again; call 3 accepts.
	f := &fakeEventBridge{fail: func(call, entry int, _ string) bool {
		return call == 1 && (entry == 2 || entry == 7) || call == 2 && entry == 0
	}}
	resp, err := newPublisher(t, f).Handle(context.Background(), consumes(10))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%v %+v", err, resp)
	}
	if f.calls != 3 || len(f.accepted) != 10 {
		t.Fatalf("calls %d, accepted %d", f.calls, len(f.accepted))
	}
	for id, n := range f.accepted {
		if n != 1 {
			t.Fatalf("event %s accepted %d times", id, n)
		}
	}
}

func TestPublishThrottlingAnd5xx(t *testing.T) {
	f := &fakeEventBridge{status: func(call int) int {
		switch call {
		case 1:
			return 400 // ThrottlingException
		case 2:
			return 500
		}
		return 200
	}}
	resp, err := newPublisher(t, f).Handle(context.Background(), consumes(25))
	if err != nil || len(resp.BatchItemFailures) != 0 || len(f.accepted) != 25 {
		t.Fatalf("%v %+v accepted %d", err, resp, len(f.accepted))
	}
}

// TestPublishGivesUp: when an entry keeps failing, the handler returns
// ErrPublishing (the mapping retries the whole batch, in order) and sends
// nothing after the failing PutEvents batch.
func TestPublishGivesUp(t *testing.T) {
	ev := consumes(30)
	ev.Records = append(ev.Records[:12], append([]lambdaevents.DynamoDBEventRecord{record("INSERT", nil, base("new"), false, "create")}, ev.Records[12:]...)...)
	// The event of action a013 is rejected every time it is sent.
	rejectID := events.EventID(events.TypeConsumed, "a013", "2023-11-14T22:13:20.000Z")
	f := &fakeEventBridge{fail: func(_, _ int, id string) bool { return id == rejectID }}
	p := newPublisher(t, f)
	resp, err := p.Handle(context.Background(), ev)
	if !errors.Is(err, ErrPublishing) || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("err %v, failures %+v; want ErrPublishing alone", err, resp.BatchItemFailures)
	}
	if f.accepted[rejectID] != 0 {
		t.Fatal("the rejected event was counted as accepted")
	}
	if len(f.accepted) != 19 || f.accepted[events.EventID(events.TypeConsumed, "a020", "2023-11-14T22:13:20.000Z")] != 0 {
		t.Fatalf("%d accepted, want the 19 of the first two batches but a013", len(f.accepted))
	}
	if f.calls != 1+p.Attempts {
		t.Fatalf("%d calls, want 1 + %d attempts of the failing batch", f.calls, p.Attempts)
	}
}

// TestRebuild: the event rebuilt from a finished action in the table is the
// one Derive made from its stream record, id and detail alike.
func TestRebuild(t *testing.T) {
	for _, tc := range []struct {
		name string
		cur  img
	}{
		{"consumed", base("a", "consumedAt", str("2023-11-14T23:00:00.000Z"), "consumedReason", str("checkout"))},
		{"canceled", base("a", "canceledAt", str("2023-11-14T23:00:00.000Z"), "cancelReason", str("refund"))},
		{"expired", base("a", "expiredAt", str("2023-11-15T22:14:00.000Z"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fromStream, err := Derive(record("MODIFY", base("a"), tc.cur, false, "1"))
			if err != nil {
				t.Fatal(err)
			}
			a, err := decode(tc.cur)
			if err != nil {
				t.Fatal(err)
			}
			rebuilt, at, err := Rebuild(a)
			if err != nil || rebuilt == nil || at.IsZero() {
				t.Fatalf("%v %v %v", rebuilt, at, err)
			}
			if rebuilt.EventID != fromStream.EventID || string(rebuilt.Detail) != string(fromStream.Detail) || rebuilt.DetailType != fromStream.DetailType {
				t.Fatalf("rebuilt %s %s\n stream %s %s", rebuilt.EventID, rebuilt.Detail, fromStream.EventID, fromStream.Detail)
			}
		})
	}
	open, _ := decode(base("a"))
	if e, _, err := Rebuild(open); e != nil || err != nil {
		t.Fatalf("an open action rebuilt into %v, %v", e, err)
	}
}

// poison is a stream record of an action whose image the store cannot
// decode (userId is a number), with its keys and creation time.
func poison(seq string) lambdaevents.DynamoDBEventRecord {
	bad := base("bad", "userId", num(7), "consumedAt", str("2023-11-14T23:00:00.000Z"))
	r := record("MODIFY", base("bad", "userId", num(7)), bad, false, seq)
	r.Change.Keys = img{"actionId": str("bad")}
	r.Change.ApproximateCreationDateTime = lambdaevents.SecondsEpochTime{Time: time.Now()}
	return r
}

// TestPoisonRecord (issue 14, seen 1): one undecodable record in a batch
// does not hold back the events of the others. Every decodable record's
// event is published in the same invocation (those before it would
// otherwise be checkpointed unpublished; those after it are re-sent with
// the same ids on the retry); only the poison record is reported, and after
// PoisonAttempts reports it is set aside with its keys, sequence number,
// time and error, and the batch succeeds.
func TestPoisonRecord(t *testing.T) {
	ev := consumes(5)
	ev.Records = append(ev.Records[:3], append([]lambdaevents.DynamoDBEventRecord{poison("bad-seq")}, ev.Records[3:]...)...)
	f := &fakeEventBridge{}
	p := newPublisher(t, f)
	var aside []Aside
	p.SetAside = func(_ context.Context, a Aside) error { aside = append(aside, a); return nil }

	for attempt := 1; attempt <= p.PoisonAttempts; attempt++ {
		resp, err := p.Handle(context.Background(), ev)
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		if len(f.accepted) != 5 {
			t.Fatalf("attempt %d: %d of 5 events accepted (%d PutEvents calls)", attempt, len(f.accepted), f.calls)
		}
		last := attempt == p.PoisonAttempts
		switch {
		case !last && (len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "bad-seq"):
			t.Fatalf("attempt %d: batch item failures %+v, want only the poison record", attempt, resp.BatchItemFailures)
		case last && len(resp.BatchItemFailures) != 0:
			t.Fatalf("attempt %d: batch item failures %+v after setting it aside", attempt, resp.BatchItemFailures)
		case !last && len(aside) != 0:
			t.Fatalf("attempt %d: set aside before its retries", attempt)
		}
		// Lambda retries from the reported record: the records before it are done.
		if attempt == 1 {
			ev.Records = ev.Records[3:]
		}
	}
	if len(aside) != 1 {
		t.Fatalf("%d records set aside, want 1", len(aside))
	}
	a := aside[0]
	if a.SequenceNumber != "bad-seq" || a.Keys["actionId"] != "bad" || a.EventName != "MODIFY" || a.ApproximateCreationTime == "" ||
		!strings.Contains(a.Error, "userId") || a.Attempts != p.PoisonAttempts {
		t.Fatalf("set aside %+v", a)
	}
	if b, _ := json.Marshal(a); strings.Contains(string(b), "sealed-secret-bytes") || strings.Contains(string(b), "c2VhbGVk") {
		t.Fatalf("set-aside record leaks the payload: %s", b)
	}
	for id, n := range f.accepted {
		if n < 1 {
			t.Fatalf("event %s not accepted", id)
		}
	}
}

// TestNonRetryableEntrySetAside: an entry EventBridge refuses with a
// non-retryable code (MalformedDetail, AccessDeniedException, …) is not
// retried within the invocation and does not hold the shard: the events
// around it are published, its record alone is reported, and after
// PoisonAttempts reports it is set aside with the event and the error;
// an entry refused with a retryable code is retried as before.
func TestNonRetryableEntrySetAside(t *testing.T) {
	for _, code := range []string{"MalformedDetail", "AccessDeniedException", "NotAuthorizedForSourceException", "InvalidArgument"} {
		t.Run(code, func(t *testing.T) {
			ev := consumes(5)
			refused := events.EventID(events.TypeConsumed, "a002", "2023-11-14T22:13:20.000Z")
			f := &fakeEventBridge{failCode: code, fail: func(_, _ int, id string) bool { return id == refused }}
			p := newPublisher(t, f)
			var aside []Aside
			p.SetAside = func(_ context.Context, a Aside) error { aside = append(aside, a); return nil }
			seq := ev.Records[2].Change.SequenceNumber
			for attempt := 1; attempt <= p.PoisonAttempts; attempt++ {
				calls := f.calls
				resp, err := p.Handle(context.Background(), ev)
				if err != nil {
					t.Fatalf("attempt %d: %v (a non-retryable entry must not fail the batch)", attempt, err)
				}
				if f.calls-calls != 1 {
					t.Fatalf("attempt %d: %d PutEvents calls, want 1 (no retry of a non-retryable entry)", attempt, f.calls-calls)
				}
				last := attempt == p.PoisonAttempts
				switch {
				case !last && (len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != seq):
					t.Fatalf("attempt %d: batch item failures %+v, want only %s", attempt, resp.BatchItemFailures, seq)
				case last && len(resp.BatchItemFailures) != 0:
					t.Fatalf("attempt %d: batch item failures %+v after setting it aside", attempt, resp.BatchItemFailures)
				}
				if attempt == 1 {
					if len(f.accepted) != 4 {
						t.Fatalf("%d events accepted, want the 4 around the refused one", len(f.accepted))
					}
					ev.Records = ev.Records[2:] // Lambda retries from the reported record
				}
			}
			if len(aside) != 1 {
				t.Fatalf("%d set aside, want 1", len(aside))
			}
			a := aside[0]
			if a.SequenceNumber != seq || a.ErrorCode != code || !strings.Contains(a.Error, code) || a.Event == nil ||
				a.Event.DetailType != events.TypeConsumed || !strings.Contains(a.Event.Detail, refused) || a.Attempts != p.PoisonAttempts {
				t.Fatalf("set aside %+v (event %+v)", a, a.Event)
			}
			if f.accepted[refused] != 0 {
				t.Fatal("the refused event was counted as accepted")
			}
		})
	}
}

// TestPoisonRecordTooOld: a poison record older than PoisonMaxAge is set
// aside at once (a fresh instance has no count of earlier reports).
func TestPoisonRecordTooOld(t *testing.T) {
	ev := consumes(2)
	old := poison("old-seq")
	old.Change.ApproximateCreationDateTime = lambdaevents.SecondsEpochTime{Time: time.Now().Add(-time.Hour)}
	ev.Records = append(ev.Records, old)
	f := &fakeEventBridge{}
	p := newPublisher(t, f)
	var aside []Aside
	p.SetAside = func(_ context.Context, a Aside) error { aside = append(aside, a); return nil }
	resp, err := p.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 || len(aside) != 1 || len(f.accepted) != 2 {
		t.Fatalf("err %v, failures %+v, aside %d, accepted %d", err, resp.BatchItemFailures, len(aside), len(f.accepted))
	}
}

// TestOutageIsAFunctionError (issue 14, seen 2): when EventBridge keeps
// failing, the handler returns an error (so the mapping retries the same
// batch with its backoff, until the record age limit, and the Errors alarm
// sees it) instead of a batch item failure that spends a retry attempt, and
// it emits EntriesFailed with the dimensions the alarm watches.
func TestOutageIsAFunctionError(t *testing.T) {
	f := &fakeEventBridge{status: func(int) int { return 503 }}
	p := newPublisher(t, f)
	var emf bytes.Buffer
	p.Metrics = telemetry.New(&emf)
	resp, err := p.Handle(context.Background(), consumes(25))
	if !errors.Is(err, ErrPublishing) {
		t.Fatalf("err %v, want ErrPublishing (a function error)", err)
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batch item failures %+v alongside the function error", resp.BatchItemFailures)
	}
	if want := p.Attempts * retry.DefaultMaxAttempts; f.calls != want {
		t.Fatalf("%d PutEvents calls, want %d: the first batch's attempts (each with the SDK's own), then stop (order is kept)", f.calls, want)
	}
	var failed float64
	for _, tot := range p.Metrics.Totals() {
		if tot.Metric == MetricEntriesFailed && tot.Dimensions[DimFunction] == FunctionName && len(tot.Dimensions) == 1 {
			failed += tot.Sum
		}
	}
	if failed != 25 {
		t.Fatalf("%s = %v, want 25 (every entry not accepted)\n%s", MetricEntriesFailed, failed, emf.String())
	}
	if !strings.Contains(emf.String(), `"Namespace":"`+telemetry.Namespace+`"`) {
		t.Fatalf("EMF: %s", emf.String())
	}
}
