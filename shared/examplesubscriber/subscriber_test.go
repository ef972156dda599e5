package examplesubscriber_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/events/once"
	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/eventbus"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/examplesubscriber"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestAuditOncePerEvent: the events the local stack really publishes for a
// consume and a cancel, each delivered 5 times at once to the subscriber,
// give exactly one audit line each; nothing secret is in them.
func TestAuditOncePerEvent(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.WithEvents)
	do := func(path, body string) { testkit.Do(t, nil, "POST", env.URL+path, body) }
	do("/actions", `{"actionId":"a1","userId":"u1","kind":"ticket","pin":"1234","payload":{"seat":"12F"}}`)
	do("/actions", `{"actionId":"a2","userId":"u2"}`)
	do("/actions/a1/consume", `{"pin":"1234","reason":"gate 3"}`)
	do("/actions/a2/cancel", `{"reason":"refund"}`)

	var published []eventbus.Event
	for deadline := time.Now().Add(testkit.Patience); len(published) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		published = env.Bus.Events()
	}
	if len(published) != 2 {
		t.Fatalf("%d events published, want 2", len(published))
	}

	db := dynamodb.NewFromConfig(awsconfig.Local(testkit.DynamoDB(t)))
	if err := once.CreateTable(context.Background(), db, "audit-claims"); err != nil {
		t.Fatal(err)
	}
	logs := &testkit.SyncBuffer{}
	sub := &examplesubscriber.Subscriber{Guard: once.New(db, "audit-claims"), Log: slog.New(slog.NewJSONHandler(logs, nil))}

	var wg sync.WaitGroup
	for _, e := range published {
		ev := lambdaevents.CloudWatchEvent{ID: e.ID, Source: e.Source, DetailType: e.DetailType, Detail: e.Detail}
		for range 5 {
			wg.Go(func() {
				// Redeliver like EventBridge until acknowledged.
				for try := 0; ; try++ {
					err := sub.Handle(context.Background(), ev)
					if err == nil {
						return
					}
					if try == 200 {
						t.Errorf("%s never acknowledged: %v", e.DetailType, err)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d audit lines, want 2:\n%s", len(lines), logs)
	}
	got := map[string]map[string]any{}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		got[m["type"].(string)] = m
		for _, secret := range []string{"1234", "12F", "pinHash"} {
			if strings.Contains(l, secret) {
				t.Errorf("audit line leaks %q: %s", secret, l)
			}
		}
	}
	if c := got["action.consumed"]; c["actionId"] != "a1" || c["reason"] != "gate 3" || c["kind"] != "ticket" || c["eventId"] == "" {
		t.Errorf("consumed line: %v", c)
	}
	if c := got["action.canceled"]; c["actionId"] != "a2" || c["reason"] != "refund" {
		t.Errorf("canceled line: %v", c)
	}

	bad := lambdaevents.CloudWatchEvent{Source: "exactonce", DetailType: "action.consumed", Detail: json.RawMessage(`{"version":"9","eventId":"x"}`)}
	if err := sub.Handle(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("unknown version: %v", err)
	}
	// A forged event with a real event id is refused before it is claimed.
	forged := lambdaevents.CloudWatchEvent{Source: "attacker", DetailType: "action.consumed", Detail: json.RawMessage(`{"version":"1","eventId":"x"}`)}
	if err := sub.Handle(context.Background(), forged); err == nil || !strings.Contains(err.Error(), "source") {
		t.Errorf("forged source: %v", err)
	}
}
