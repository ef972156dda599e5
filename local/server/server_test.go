package server_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/eventbus"
	"github.com/exactonce/exactonce/shared/telemetry"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func localEvents(t *testing.T, env *testkit.Env) []eventbus.Event {
	t.Helper()
	r := testkit.Do(t, nil, "GET", env.URL+"/_local/events", "")
	var evs []eventbus.Event
	if err := json.Unmarshal([]byte(r.Raw), &evs); err != nil {
		t.Fatalf("/_local/events: %v: %s", err, r.Raw)
	}
	return evs
}

// waitEvents polls /_local/events until n events are there or 10 s pass.
func waitEvents(t *testing.T, env *testkit.Env, n int) []eventbus.Event {
	t.Helper()
	deadline := time.Now().Add(testkit.Patience)
	for {
		evs := localEvents(t, env)
		if len(evs) >= n || time.Now().After(deadline) {
			return evs
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEventsEndToEnd: create, consume, cancel, a wrong PIN and a replayed
// consume through HTTP give exactly one action.consumed and one
// action.canceled, each once, with nothing secret in them.
func TestEventsEndToEnd(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.WithEvents)
	do := func(method, path, body string, h ...string) *testkit.Response {
		return testkit.Do(t, nil, method, env.URL+path, body, h...)
	}
	do("POST", "/actions", `{"actionId":"e1","userId":"u1","kind":"coupon","metadata":{"c":"bf"},"pin":"2468","payload":{"secret":"s3cr3t"}}`)
	do("POST", "/actions", `{"actionId":"e2","userId":"u2"}`)
	do("POST", "/actions", `{"actionId":"e3","userId":"u3"}`) // stays open: no event
	do("POST", "/actions/e1/consume", `{"pin":"0000"}`)       // wrong PIN: a write, no event
	start := time.Now()
	c := do("POST", "/actions/e1/consume", `{"pin":"2468","reason":"checkout"}`, "Idempotency-Key", "k")
	if c.Status != 200 {
		t.Fatalf("consume: %d %s\nserver log:\n%s", c.Status, c.Raw, env.Log.String())
	}
	first := waitEvents(t, env, 1)
	latency := time.Since(start)
	do("POST", "/actions/e1/consume", `{"pin":"2468","reason":"checkout"}`, "Idempotency-Key", "k") // replay: no write
	do("POST", "/actions/e1/consume", `{"pin":"2468"}`)                                             // already used: no write
	do("POST", "/actions/e2/cancel", `{"reason":"refund"}`)
	do("POST", "/actions/e2/cancel", ``) // second cancel: no write

	env.Settled(t) // every write published: anything extra would be there
	evs := localEvents(t, env)
	t.Logf("consume → event at /_local/events: %s", latency)
	if len(first) == 0 { // the latency is reported, not asserted: make bench measures it
		t.Fatalf("no event for the consume after %s; then, settled: %+v\nserver log:\n%s", latency, evs, env.Log.String())
	}
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2: %+v", len(evs), evs)
	}
	var consumed, canceled map[string]any
	for _, e := range evs {
		var d map[string]any
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			t.Fatal(err)
		}
		if e.Source != "exactonce" {
			t.Errorf("source %q", e.Source)
		}
		for _, secret := range []string{"s3cr3t", "2468", "pinHash", "payload", "\"k\""} {
			if strings.Contains(string(e.Detail), secret) {
				t.Errorf("event leaks %q: %s", secret, e.Detail)
			}
		}
		switch e.DetailType {
		case "action.consumed":
			consumed = d
		case "action.canceled":
			canceled = d
		}
	}
	if consumed == nil || consumed["actionId"] != "e1" || consumed["consumedAt"] != c.Str("consumedAt") || consumed["reason"] != "checkout" ||
		consumed["kind"] != "coupon" || consumed["version"] != "1" || consumed["eventId"] == "" {
		t.Errorf("consumed event: %v", consumed)
	}
	if canceled == nil || canceled["actionId"] != "e2" || canceled["reason"] != "refund" {
		t.Errorf("canceled event: %v", canceled)
	}

	// The same counters, as totals at /_local/metrics.
	var totals []telemetry.Total
	if err := json.Unmarshal([]byte(testkit.Do(t, nil, "GET", env.URL+"/_local/metrics", "").Raw), &totals); err != nil {
		t.Fatal(err)
	}
	sum := func(metric string, dims map[string]string) float64 {
		var n float64
	next:
		for _, tot := range totals {
			if tot.Metric != metric {
				continue
			}
			for k, v := range dims {
				if tot.Dimensions[k] != v {
					continue next
				}
			}
			n += tot.Sum
		}
		return n
	}
	for _, c := range []struct {
		metric string
		dims   map[string]string
		want   float64
	}{
		{"Requests", map[string]string{"Route": "POST /actions"}, 3},
		{"Requests", map[string]string{"Route": "POST /actions/{actionId}/consume", "Outcome": "consumed"}, 1},
		{"Requests", map[string]string{"Route": "POST /actions/{actionId}/consume", "Outcome": "replayed"}, 1},
		{"Requests", map[string]string{"Route": "POST /actions/{actionId}/consume", "Outcome": "invalid_pin"}, 1},
		{"Requests", map[string]string{"Route": "POST /actions/{actionId}/consume", "Outcome": "already_used"}, 1},
		{"Requests", map[string]string{"Route": "POST /actions/{actionId}/cancel"}, 2},
		{"EventsPublished", map[string]string{"Function": "publisher"}, 2},
		{"BatchItemFailures", map[string]string{"Function": "publisher"}, 0},
	} {
		if got := sum(c.metric, c.dims); got != c.want {
			t.Errorf("%s %v = %v, want %v", c.metric, c.dims, got, c.want)
		}
	}
}
