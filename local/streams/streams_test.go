package streams_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/smithy-go/middleware"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/streams"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// newTable creates the store's table named name on the test binary's
// DynamoDB Local (stream on) and returns the SDK config and client for it.
func newTable(ctx context.Context, t *testing.T, name string) (aws.Config, *dynamodb.Client) {
	t.Helper()
	cfg := awsconfig.Local(testkit.DynamoDB(t))
	db := dynamodb.NewFromConfig(cfg)
	if err := store.CreateTable(ctx, db, name, true); err != nil {
		t.Fatal(err)
	}
	return cfg, db
}

// TestBatchItemFailures: like the Lambda event source mapping, the reader
// retries a batch from the first record the handler reports as failed (and
// the whole batch after an error), so every record is accepted exactly
// once, in order, with none skipped.
func TestBatchItemFailures(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, db := newTable(ctx, t, "streams-test")
	const n = 25
	var want []string
	for i := range n {
		id := fmt.Sprintf("a%02d", i)
		want = append(want, id)
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("streams-test"),
			Item: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}}})
		if err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var accepted []string
	calls := 0
	handle := func(_ context.Context, ev lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch calls {
		case 2: // fail the 4th record of this batch: the first 3 are accepted
			for _, r := range ev.Records[:3] {
				accepted = append(accepted, r.Change.Keys["actionId"].String())
			}
			return lambdaevents.DynamoDBEventResponse{BatchItemFailures: []lambdaevents.DynamoDBBatchItemFailure{
				{ItemIdentifier: ev.Records[3].Change.SequenceNumber},
			}}, nil
		case 3: // the whole retried batch fails
			return lambdaevents.DynamoDBEventResponse{}, errors.New("function error")
		}
		for _, r := range ev.Records {
			accepted = append(accepted, r.Change.Keys["actionId"].String())
		}
		return lambdaevents.DynamoDBEventResponse{}, nil
	}
	r := &streams.Reader{DB: db, Streams: dynamodbstreams.NewFromConfig(cfg), Table: "streams-test",
		Handle: handle, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Batch: 10, Poll: 20 * time.Millisecond}
	go r.Run(ctx)

	deadline := time.Now().Add(testkit.Patience)
	for {
		mu.Lock()
		got := slices.Clone(accepted)
		mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			if !slices.Equal(got, want) {
				t.Fatalf("accepted %v\nwant     %v", got, want)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls < 5 {
		t.Errorf("%d handler calls; want the failed batch retried twice", calls)
	}
}

// TestSetAsideThenGoOn: like the mapping with MaximumRetryAttempts, a batch
// whose failure persists is retried that many times (with a backoff), then
// what is left of it goes to the on-failure destination with its shard and
// sequence range, and the shard goes on with the next records.
func TestSetAsideThenGoOn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const table = "streams-aside"
	cfg, db := newTable(ctx, t, table)
	put := func(id string) {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table),
			Item: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		put(fmt.Sprintf("b%02d", i))
	}
	var mu sync.Mutex
	var handled []string
	var aside []streams.OnFailure
	invokes := 0
	handle := func(_ context.Context, ev lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		invokes++
		for _, r := range ev.Records {
			if id := r.Change.Keys["actionId"].String(); id == "b03" {
				return lambdaevents.DynamoDBEventResponse{BatchItemFailures: []lambdaevents.DynamoDBBatchItemFailure{{ItemIdentifier: r.Change.SequenceNumber}}}, nil
			} else if !slices.Contains(handled, id) {
				handled = append(handled, id)
			}
		}
		return lambdaevents.DynamoDBEventResponse{}, nil
	}
	r := &streams.Reader{DB: db, Streams: dynamodbstreams.NewFromConfig(cfg), Table: table, Handle: handle,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Batch: 100, Poll: 20 * time.Millisecond,
		RetryAttempts: 2, Backoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond,
		SetAside: func(_ context.Context, f streams.OnFailure) { mu.Lock(); aside = append(aside, f); mu.Unlock() }}
	go r.Run(ctx)

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(testkit.Patience); ; time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			done := ok()
			mu.Unlock()
			if done {
				return
			}
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%s: handled %v, set aside %+v, %d invocations", what, handled, aside, invokes)
			}
		}
	}
	waitFor("set aside", func() bool { return len(aside) == 1 })
	put("b06") // the shard goes on
	waitFor("goes on", func() bool { return slices.Contains(handled, "b06") })
	mu.Lock()
	defer mu.Unlock()
	f := aside[0]
	if f.Condition != "RetryAttemptsExhausted" || f.ApproximateInvokeCount != 3 || f.BatchInfo.BatchSize != 3 ||
		f.BatchInfo.StartSequenceNumber == "" || f.BatchInfo.EndSequenceNumber == "" || f.BatchInfo.ShardID == "" {
		t.Fatalf("on-failure record %+v: want b03..b05 after 1 call + 2 retries", f)
	}
	if !slices.Equal(handled, []string{"b00", "b01", "b02", "b06"}) {
		t.Fatalf("handled %v", handled)
	}
}

// TestRecordAgeSetAside: records older than MaxRecordAge are not handed to
// the handler but set aside (condition RecordAgeExceeded), as the mapping
// does with MaximumRecordAgeInSeconds.
func TestRecordAgeSetAside(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const table = "streams-age"
	cfg, db := newTable(ctx, t, table)
	for i := range 3 {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table),
			Item: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: fmt.Sprint("c", i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var aside []streams.OnFailure
	handled := 0
	r := &streams.Reader{DB: db, Streams: dynamodbstreams.NewFromConfig(cfg), Table: table,
		Handle: func(_ context.Context, ev lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error) {
			mu.Lock()
			handled += len(ev.Records)
			mu.Unlock()
			return lambdaevents.DynamoDBEventResponse{}, nil
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: 20 * time.Millisecond, MaxRecordAge: time.Nanosecond,
		SetAside: func(_ context.Context, f streams.OnFailure) { mu.Lock(); aside = append(aside, f); mu.Unlock() }}
	go r.Run(ctx)
	for deadline := time.Now().Add(testkit.Patience); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(aside)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(aside) != 1 || aside[0].Condition != "RecordAgeExceeded" || aside[0].BatchInfo.BatchSize != 3 || handled != 0 {
		t.Fatalf("set aside %+v, handled %d", aside, handled)
	}
}

// TestCaughtUpWaitsOutFailedReads: a pass over the shards in which a read
// failed has not found "nothing new": CaughtUp returns only after the
// records written before it are handled, however many passes fail first
// (here GetRecords answers 503 until the outage ends).
func TestCaughtUpWaitsOutFailedReads(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const table = "streams-caught-up"
	_, db := newTable(ctx, t, table)
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table),
		Item: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: "w1"}}}); err != nil {
		t.Fatal(err)
	}
	proxy, err := faults.Start(testkit.Endpoint, faults.Rates{}, 1, "GetRecords")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.Down(true)
	scfg := awsconfig.Local(proxy.URL)
	scfg.Retryer = func() aws.Retryer { return retry.AddWithMaxBackoffDelay(retry.NewStandard(), 20*time.Millisecond) }
	var handled atomic.Int64
	r := &streams.Reader{DB: db, Streams: dynamodbstreams.NewFromConfig(scfg), Table: table,
		Handle: func(_ context.Context, ev lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error) {
			handled.Add(int64(len(ev.Records)))
			return lambdaevents.DynamoDBEventResponse{}, nil
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: 20 * time.Millisecond}
	go r.Run(ctx)

	refused := func(n int64) { // waits until n GetRecords requests were refused
		t.Helper()
		for deadline := time.Now().Add(testkit.Patience); proxy.Counts().Unavailable < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d GetRecords refused, waited for %d", proxy.Counts().Unavailable, n)
			}
		}
	}
	refused(1)
	caughtUp := make(chan error, 1)
	go func() {
		cctx, ccancel := context.WithTimeout(ctx, testkit.Patience)
		defer ccancel()
		caughtUp <- r.CaughtUp(cctx)
	}()
	// Five passes' worth of reads (the SDK's 3 attempts each), all refused:
	// a reader that counted a failed pass as idle has returned by now.
	refused(proxy.Counts().Unavailable + 15)
	select {
	case err := <-caughtUp:
		t.Fatalf("CaughtUp returned (%v) while every read failed; %d records handled", err, handled.Load())
	default:
	}
	proxy.Down(false)
	if err := <-caughtUp; err != nil {
		t.Fatal(err)
	}
	if handled.Load() != 1 {
		t.Fatalf("CaughtUp returned with %d records handled, want 1", handled.Load())
	}
	t.Logf("%s", proxy)
}

// TestReadsCloseTheirAnswers: polling an idle stream holds nothing per
// read. config.Local bounds each attempt (an http.Client timeout), and an
// answer whose body is never closed keeps a goroutine and its request for
// that minute: at the soak's rate the local server's memory grew 2.5× in a
// minute (33 MB to 84 MB), all of it GetRecords answers read by the
// reader's capture and never closed.
func TestReadsCloseTheirAnswers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, db := newTable(ctx, t, "streams-idle")
	var polls atomic.Int32
	cfg.APIOptions = append(cfg.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("countPolls", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if _, ok := in.Parameters.(*dynamodbstreams.GetRecordsInput); ok {
				polls.Add(1)
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
	})
	r := &streams.Reader{DB: db, Streams: dynamodbstreams.NewFromConfig(cfg), Table: "streams-idle",
		Handle: func(context.Context, lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error) {
			return lambdaevents.DynamoDBEventResponse{}, nil
		}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: time.Millisecond}
	go r.Run(ctx)
	for deadline := time.Now().Add(testkit.Patience); polls.Load() < 200 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	buf := make([]byte, 16<<20)
	held := strings.Count(string(buf[:runtime.Stack(buf, true)]), "created by net/http.setRequestCancel")
	t.Logf("%d GetRecords polls; %d requests still held", polls.Load(), held)
	if polls.Load() < 200 || held > 10 {
		t.Fatalf("after %d GetRecords polls, %d requests are still held (their answers never closed)", polls.Load(), held)
	}
}

// TestTrimmedIteratorReopensTheShard: an iterator that answers
// TrimmedDataAccessException stays dead (DynamoDB Local trimmed one under
// the load of another test's 10,000 writes, and the reader then asked with
// it once a second for good: CaughtUp never returned). The reader opens
// the shard again after the last record it read: every record is handled
// once, in order, none skipped.
func TestTrimmedIteratorReopensTheShard(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, db := newTable(ctx, t, "streams-trimmed")
	p, err := faults.Start(testkit.Endpoint, faults.Rates{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var mu sync.Mutex
	var handled []string
	r := &streams.Reader{DB: db, Streams: dynamodbstreams.NewFromConfig(awsconfig.Local(p.URL)), Table: "streams-trimmed",
		Handle: func(_ context.Context, ev lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, rec := range ev.Records {
				handled = append(handled, rec.Change.Keys["actionId"].String())
			}
			return lambdaevents.DynamoDBEventResponse{}, nil
		}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: 20 * time.Millisecond}
	go r.Run(ctx)
	var want []string
	put := func(from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprintf("a%02d", i)
			want = append(want, id)
			if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("streams-trimmed"),
				Item: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	settled := func() {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, testkit.Patience)
		defer wcancel()
		if err := r.CaughtUp(wctx); err != nil {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the reader did not catch up within %s (%d records handled, %d trimmed answers): %v", testkit.Patience, len(handled), p.Counts().Trimmed, err)
		}
	}
	put(0, 5)
	settled()
	p.TrimNextIterator()
	put(5, 10)
	settled()
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(handled, want) || p.Counts().Trimmed == 0 {
		t.Fatalf("handled %v after %d trimmed answers\nwant    %v", handled, p.Counts().Trimmed, want)
	}
	t.Logf("%d records handled once each, in order, across %d trimmed answers", len(handled), p.Counts().Trimmed)
}
