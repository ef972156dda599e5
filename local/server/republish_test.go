package server_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/eventbus"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/shared/republish"
)

// TestRepublish (issue 14, "republish"): 40 actions are consumed and 10
// canceled while the bus loses every event it accepts; 20 consumed before
// that were delivered. Republishing the window (through the republish
// Lambda's handler, as POST /_local/republish runs it) twice gives every
// transition's event, with the ids the stream publisher gave them: after
// de-duplication the subscriber handles each of the 70 exactly once. An
// idempotency key and an open action in the window are not republished.
func TestRepublish(t *testing.T) {
	t.Parallel()
	var proxy *faults.Proxy
	env := testkit.NewEnv(t, scaled(t, func(bus string) string {
		var err error
		if proxy, err = faults.Start(bus, faults.Rates{}, 4, "PutEvents"); err != nil {
			t.Fatal(err)
		}
		return proxy.URL
	}))
	t.Cleanup(proxy.Close)
	from := time.Now().Add(-time.Second).UTC()
	do := func(path, body string) *testkit.Response { return testkit.Do(t, nil, "POST", env.URL+path, body) }

	consumeAll(t, env, "kept", 20)
	waitDistinct(t, env, 20)
	proxy.Lose(true)
	consumeAll(t, env, "lost", 40)
	for i := range 10 {
		do("/actions", fmt.Sprintf(`{"actionId":"cancel-%d","userId":"u"}`, i))
		do(fmt.Sprintf("/actions/cancel-%d/cancel", i), `{"reason":"refund"}`)
	}
	do("/actions", `{"actionId":"still-open","userId":"u"}`)
	do("/keys/k-1/claim", `{"fingerprint":"f"}`)
	env.Settled(t) // the stream publisher has "published" them all into the void
	proxy.Lose(false)
	if n := distinct(localEvents(t, env)); n != 20 {
		t.Fatalf("%d events before republish, want the 20 kept", n)
	}

	before := proxy.Counts().Requests
	body := fmt.Sprintf(`{"from":%q,"to":%q,"segments":4}`, from.Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))
	var results []republish.Result
	for range 2 { // safe to run twice
		r := do("/_local/republish", body)
		var res republish.Result
		if err := json.Unmarshal([]byte(r.Raw), &res); err != nil || r.Status != 200 {
			t.Fatalf("republish: %d %s", r.Status, r.Raw)
		}
		results = append(results, res)
	}
	evs := waitDistinct(t, env, 70)
	runs := dedupe(t, evs)
	if len(runs) != 70 {
		t.Fatalf("%d distinct events, want 70", len(runs))
	}
	for id, k := range runs {
		if k != 1 {
			t.Fatalf("event %s handled %d times", id, k)
		}
	}
	for _, res := range results {
		if res.Matched != 70 || res.Published != 70 || res.Scanned != 72 {
			t.Fatalf("result %+v: want 72 items scanned (70 finished actions, an open one, a key), 70 published", res)
		}
	}
	perMillion := results[0].ReadUnits / float64(results[0].Scanned) * 1e6
	t.Logf("republish of a window with 70 finished actions (50 events lost on purpose): %d items scanned in %d segments, %.1f read units (%.0f per million items: $%.4f at $0.125 per million on-demand read units), %d + %d events published in %d ms + %d ms, %d PutEvents requests; %d deliveries, each of the 70 ids handled once after de-dup",
		results[0].Scanned, results[0].Segments, results[0].ReadUnits, perMillion, perMillion*0.125/1e6,
		results[0].Published, results[1].Published, results[0].Millis, results[1].Millis, proxy.Counts().Requests-before, len(evs))
}

func waitDistinct(t *testing.T, env *testkit.Env, n int) []eventbus.Event {
	t.Helper()
	for deadline := time.Now().Add(testkit.Patience); ; time.Sleep(20 * time.Millisecond) {
		evs := localEvents(t, env)
		if distinct(evs) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d distinct events, want %d", distinct(evs), n)
		}
	}
}
