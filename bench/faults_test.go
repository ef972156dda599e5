package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/client"
	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/awsconfig"
)

// keyRecorder remembers the Idempotency-Key and attempt count of every
// logical call the client makes, by the call's path.
type keyRecorder struct {
	mu       sync.Mutex
	attempts map[string]int // Idempotency-Key → attempts
}

func (k *keyRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		k.mu.Lock()
		k.attempts[key]++
		k.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestLoadWithFaults: 32 concurrent clients create 1,000 actions and consume
// each twice (two different logical calls racing), through the Go client's
// retries, while a proxy in front of DynamoDB Local throttles, fails and
// drops connections after applying writes, and another does the same in
// front of the local EventBridge. Exactly one call consumes each action,
// every retried call keeps its outcome, and every consumed action gets
// exactly one action.consumed event id — none lost.
func TestLoadWithFaults(t *testing.T) {
	t.Parallel() // with the bench's other correctness tests (make test: under -race)
	// Under -race no fewer than 200: below that the EventBridge proxy sees
	// too few requests for each of its faults to come up (50: 8 requests, no 500).
	actions, workers := max(testkit.Scale(1000), 200), 32
	rates := faults.Rates{Throttle: 0.05, ServerError: 0.03, DropAfter: 0.05}
	own := testkit.OwnDynamoDB(t)
	dbProxy, err := faults.Start(own, rates, 1, "UpdateItem", "GetItem")
	if err != nil {
		t.Fatal(err)
	}
	defer dbProxy.Close()
	var ebProxy *faults.Proxy
	defer func() {
		if ebProxy != nil {
			ebProxy.Close()
		}
	}()
	cfg := awsconfig.Local(dbProxy.URL)
	cfg.Retryer = func() aws.Retryer { // the SDK's own 3 attempts, with short waits
		return retry.AddWithMaxBackoffDelay(retry.NewStandard(), 50*time.Millisecond)
	}
	eventLog := &testkit.SyncBuffer{}
	env := testkit.NewEnv(t, func(o *server.Options) {
		o.AWS = &cfg
		o.Events = true
		o.EventLog = eventLog
		o.EventBridgeVia = func(bus string) string {
			if ebProxy, err = faults.Start(bus, faults.Rates{ServerError: 0.1, DropAfter: 0.1}, 2); err != nil {
				t.Fatal(err)
			}
			return ebProxy.URL
		}
	})

	rec := &keyRecorder{attempts: map[string]int{}}
	c := client.New(env.URL, client.WithHTTPClient(&http.Client{Transport: rec, Timeout: testkit.Patience}),
		client.WithRetry(client.Retry{MaxAttempts: 8, BaseDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond}))
	ctx := context.Background()
	start := time.Now()

	ids := make([]string, actions)
	for i := range ids {
		ids[i] = fmt.Sprintf("load-%04d", i)
	}
	parallel(workers, ids, func(id string) {
		if _, err := c.CreateAction(ctx, client.CreateInput{ActionID: id, UserID: "u"}); err != nil {
			t.Errorf("create %s: %v", id, err)
		}
	})
	created := time.Since(start)

	// Each action twice, in random order: two logical calls race for it.
	work := append(append([]string(nil), ids...), ids...)
	rand.Shuffle(len(work), func(i, j int) { work[i], work[j] = work[j], work[i] })
	type outcome struct {
		ok, replayed, used int
		other              []error
	}
	var mu sync.Mutex
	got := map[string]*outcome{}
	for _, id := range ids {
		got[id] = &outcome{}
	}
	consumeStart := time.Now()
	parallel(workers, work, func(id string) {
		a, err := c.Consume(ctx, id, client.ConsumeInput{Reason: "load"})
		mu.Lock()
		defer mu.Unlock()
		o := got[id]
		switch {
		case err == nil && a.State == "consumed":
			o.ok++
			if a.Replayed {
				o.replayed++
			}
		case errors.Is(err, client.ErrAlreadyUsed):
			o.used++
		default:
			o.other = append(o.other, err)
		}
	})
	consumed := time.Since(consumeStart)
	consumeEnd := time.Now()

	replays := 0
	for id, o := range got {
		if o.ok != 1 || o.used != 1 || len(o.other) > 0 {
			t.Errorf("%s: %d consumed, %d already used, errors %v", id, o.ok, o.used, o.other)
		}
		replays += o.replayed
	}

	// The table, read past the proxy: every action consumed once.
	db := dynamodb.NewFromConfig(awsconfig.Local(own))
	for _, id := range ids {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(env.Table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}}})
		if err != nil || out.Item["consumedAt"] == nil || out.Item["consumeRequestId"] == nil {
			t.Fatalf("%s not consumed in the table: %v", id, err)
		}
	}

	// Events: each consumed action exactly one event id, however often the
	// publisher had to retry PutEvents (duplicate deliveries share the id).
	var ids1 map[string]map[string]int
	deadline := time.Now().Add(testkit.Patience)
	for {
		ids1 = consumedEvents(t, eventLog.String())
		if len(ids1) >= actions || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	eventsLag := time.Since(consumeEnd)
	duplicates := 0
	for _, id := range ids {
		evs := ids1[id]
		if len(evs) != 1 {
			t.Errorf("%s: %d distinct action.consumed event ids, want 1", id, len(evs))
		}
		for _, n := range evs {
			duplicates += n - 1
		}
	}
	if len(ids1) != actions {
		t.Errorf("events for %d actions, want %d", len(ids1), actions)
	}

	retried, maxAttempts := 0, 0
	for _, n := range rec.attempts {
		if n > 1 {
			retried++
		}
		maxAttempts = max(maxAttempts, n)
	}
	t.Logf("%d actions, %d workers: create %v, %d consumes %v (%.0f/s); %d logical calls retried by the client (max %d attempts), %d consumes answered by replay",
		actions, workers, created.Round(time.Millisecond), len(work), consumed.Round(time.Millisecond), float64(len(work))/consumed.Seconds(),
		retried, maxAttempts, replays)
	t.Logf("DynamoDB proxy: %s", dbProxy)
	t.Logf("EventBridge proxy: %s; %d duplicate deliveries of an event id; all events in %v after the last consume",
		ebProxy, duplicates, eventsLag.Round(time.Millisecond))
	if c := dbProxy.Counts(); c.Dropped == 0 || c.Throttled == 0 || c.ServerErrors == 0 {
		t.Errorf("the DynamoDB faults did not all happen: %s", dbProxy)
	}
	if c := ebProxy.Counts(); c.Dropped == 0 || c.ServerErrors == 0 {
		t.Errorf("the EventBridge faults did not all happen: %s", ebProxy)
	}
}

// consumedEvents reads the bus's event lines: action id → event id → deliveries.
func consumedEvents(t *testing.T, log string) map[string]map[string]int {
	out := map[string]map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			DetailType string `json:"detailType"`
			Detail     struct {
				EventID  string `json:"eventId"`
				ActionID string `json:"actionId"`
			} `json:"detail"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("event line: %v: %s", err, sc.Text())
		}
		if line.DetailType != "action.consumed" {
			t.Fatalf("unexpected event %s", sc.Text())
		}
		if out[line.Detail.ActionID] == nil {
			out[line.Detail.ActionID] = map[string]int{}
		}
		out[line.Detail.ActionID][line.Detail.EventID]++
	}
	return out
}

// parallel runs f on every item with n goroutines.
func parallel(n int, items []string, f func(string)) {
	ch := make(chan string)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for it := range ch {
				f(it)
			}
		})
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
}
