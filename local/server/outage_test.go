package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/events/once"
	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/eventbus"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/local/streams"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/publish"
)

// scaled runs the publisher and the stream reader with retries and waits
// scaled down (seconds for hours), and the SDK's retries short.
func scaled(t *testing.T, via func(bus string) string) func(*server.Options) {
	return func(o *server.Options) {
		testkit.WithEvents(o)
		cfg := awsconfig.Local(testkit.DynamoDB(t))
		cfg.Retryer = func() aws.Retryer { return retry.AddWithMaxBackoffDelay(retry.NewStandard(), 20*time.Millisecond) }
		o.AWS = &cfg
		o.EventBridgeVia = via
		o.TuneEvents = func(p *publish.Publisher, r *streams.Reader) {
			p.Attempts, p.Backoff = 3, 50*time.Millisecond
			r.Backoff, r.MaxBackoff, r.Poll = 50*time.Millisecond, 400*time.Millisecond, 20*time.Millisecond
		}
	}
}

// dedupe is a subscriber: every delivered event through events/once on
// DynamoDB Local; it returns how often the handler ran per event id.
func dedupe(t *testing.T, evs []eventbus.Event) map[string]int {
	t.Helper()
	ctx := context.Background()
	db := dynamodb.NewFromConfig(awsconfig.Local(testkit.DynamoDB(t)))
	table := "claims-" + fmt.Sprint(time.Now().UnixNano())
	if err := once.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	guard := once.New(db, table)
	runs := map[string]int{}
	for _, e := range evs {
		var c struct{ EventID string }
		if err := json.Unmarshal(e.Detail, &c); err != nil {
			t.Fatal(err)
		}
		if _, err := guard.Do(ctx, c.EventID, func(context.Context) error { runs[c.EventID]++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	return runs
}

// consumeAll creates and consumes n actions, 8 at a time, and returns their ids.
func consumeAll(t *testing.T, env *testkit.Env, prefix string, n int) []string {
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			for _, call := range [][2]string{{"/actions", `{"actionId":"` + ids[i] + `","userId":"u"}`}, {"/actions/" + ids[i] + "/consume", ""}} {
				if r, err := testkit.Send(nil, "POST", env.URL+call[0], call[1]); err != nil || r.Status >= 300 {
					t.Errorf("POST %s: %v %v", call[0], err, r)
				}
			}
		})
	}
	wg.Wait()
	return ids
}

// TestEventBridgeOutage (issue 14, "outages up to the stream's retention"):
// the local EventBridge is unavailable while 200 actions are consumed and
// for a while after (seconds standing in for hours). The publisher returns
// a function error, the reader retries the same batch with its backoff and
// no retry limit; after recovery every event arrives, each id exactly once
// after de-duplication at the subscriber, and nothing was set aside.
func TestEventBridgeOutage(t *testing.T) {
	t.Parallel()
	// outageRetries is how many more PutEvents requests the outage refuses
	// after the last write: an invocation of the publisher is refused at
	// most its 3 attempts times the SDK's 3, so this spans at least 4 of the
	// reader's retries of the batch, with its backoff between them.
	const outageRetries = 36
	const n = 200
	var proxy *faults.Proxy
	env := testkit.NewEnv(t, scaled(t, func(bus string) string {
		var err error
		if proxy, err = faults.Start(bus, faults.Rates{}, 3, "PutEvents"); err != nil {
			t.Fatal(err)
		}
		return proxy.URL
	}))
	t.Cleanup(proxy.Close)
	proxy.Down(true)
	start := time.Now()
	ids := consumeAll(t, env, "out", n)
	// The outage goes on after the writes, through more of the reader's
	// retries (polled, not a fixed wait: a loaded machine retries slower).
	for refused, deadline := proxy.Counts().Unavailable, time.Now().Add(testkit.Patience); proxy.Counts().Unavailable < refused+outageRetries; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the publisher was refused %d more times in %s, want %d", proxy.Counts().Unavailable-refused, testkit.Patience, outageRetries)
		}
	}
	if evs := localEvents(t, env); len(evs) != 0 {
		t.Fatalf("%d events arrived during the outage", len(evs))
	}
	during := proxy.Counts()
	outage := time.Since(start)
	proxy.Down(false)
	recovered := time.Now()

	var evs []eventbus.Event
	for deadline := time.Now().Add(testkit.Patience); ; time.Sleep(20 * time.Millisecond) {
		evs = localEvents(t, env)
		if distinct(evs) >= n || time.Now().After(deadline) {
			break
		}
	}
	drain := time.Since(recovered)
	env.Settled(t) // every write published: late duplicates would be there
	evs = localEvents(t, env)
	after := proxy.Counts()
	runs := dedupe(t, evs)
	byAction := map[string]bool{}
	for _, e := range evs {
		var c struct{ ActionID string }
		_ = json.Unmarshal(e.Detail, &c)
		byAction[c.ActionID] = true
	}
	for _, id := range ids {
		if !byAction[id] {
			t.Fatalf("no event for %s", id)
		}
	}
	if len(runs) != n {
		t.Fatalf("%d distinct events after recovery, want %d", len(runs), n)
	}
	for id, k := range runs {
		if k != 1 {
			t.Fatalf("event %s handled %d times after de-duplication", id, k)
		}
	}
	if dl := testkit.Do(t, nil, "GET", env.URL+"/_local/dead-letters", ""); dl.Raw != "[]\n" {
		t.Fatalf("set aside during the outage: %s", dl.Raw)
	}
	t.Logf("outage %.1fs, %d events: %d PutEvents requests refused during it; drained %.2fs after recovery with %d more PutEvents requests; %d deliveries (%d duplicates), each id handled once after de-dup; 0 set aside",
		outage.Seconds(), n, during.Unavailable, drain.Seconds(), after.Requests-during.Requests, len(evs), len(evs)-n)
}

func distinct(evs []eventbus.Event) int {
	seen := map[string]bool{}
	for _, e := range evs {
		var c struct{ EventID string }
		_ = json.Unmarshal(e.Detail, &c)
		seen[c.EventID] = true
	}
	return len(seen)
}

// TestPoisonRecordLocally (issue 14, "poison records"): an item the
// publisher cannot read (userId a number) between consumptions does not
// hold their events back: all of them arrive, and the bad record is set
// aside after its retries, visible at /_local/dead-letters with its keys,
// sequence number, time and error.
func TestPoisonRecordLocally(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, scaled(t, nil))
	consumeAll(t, env, "before", 3)
	_, err := env.DB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(env.Table), Item: map[string]types.AttributeValue{
		"actionId": &types.AttributeValueMemberS{Value: "poison-1"}, "userId": &types.AttributeValueMemberN{Value: "7"},
		"payload": &types.AttributeValueMemberB{Value: []byte("sealed-secret")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	consumeAll(t, env, "after", 3)
	var dead []publish.Aside
	for deadline := time.Now().Add(testkit.Patience); ; time.Sleep(20 * time.Millisecond) {
		raw := testkit.Do(t, nil, "GET", env.URL+"/_local/dead-letters", "").Raw
		if err := json.Unmarshal([]byte(raw), &dead); err != nil {
			t.Fatal(err)
		}
		if (len(dead) > 0 && distinct(localEvents(t, env)) == 6) || time.Now().After(deadline) {
			break
		}
	}
	if n := distinct(localEvents(t, env)); n != 6 {
		t.Fatalf("%d of 6 events published around the poison record", n)
	}
	if len(dead) != 1 || dead[0].Keys["actionId"] != "poison-1" || dead[0].SequenceNumber == "" || dead[0].ApproximateCreationTime == "" ||
		dead[0].Error == "" || dead[0].Attempts != publish.DefaultPoisonAttempts {
		t.Fatalf("dead letters %+v", dead)
	}
	raw := testkit.Do(t, nil, "GET", env.URL+"/_local/dead-letters", "").Raw
	if strings.Contains(raw, "sealed-secret") || strings.Contains(raw, "c2VhbGVk") {
		t.Fatalf("dead letter leaks the payload: %s", raw)
	}
}
