package httpapi_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestLogsAndMetrics drives every outcome through the handlers and checks
// what they print: one request line each with the operator's fields, valid
// EMF metric lines, and no secret anywhere (PIN, payload, server secret,
// Idempotency-Key value, request bodies).
func TestLogsAndMetrics(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	const (
		pin        = "pin-Qz8-marker" // a digit-only PIN could occur by chance in a latency or a time
		payload    = "pl-s3cr3t-value"
		key        = "idem-key-secret-123"
		reasonBody = "reason-body-marker"
	)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	steps := []struct{ method, path, body, key, outcome string }{
		{"POST", "/actions", `{"actionId":"p1","userId":"u","pin":"` + pin + `","maxPinAttempts":3,"payload":{"s":"` + payload + `"}}`, key, "created"},
		{"POST", "/actions", `{"actionId":"p1","userId":"u","pin":"` + pin + `","maxPinAttempts":3,"payload":{"s":"` + payload + `"}}`, key, "replayed"},
		{"POST", "/actions", `{"actionId":"p1","userId":"u"}`, key, "idempotency_key_reused"},
		{"POST", "/actions", `{"actionId":"p1","userId":"u"}`, "", "action_exists"},
		{"GET", "/actions/p1", "", "", "ok"},
		{"POST", "/actions/p1/consume", `{"pin":"00000"}`, "", "invalid_pin"},
		{"POST", "/actions/p1/consume", `{"pin":"` + pin + `","reason":"` + reasonBody + `"}`, key + "-2", "consumed"},
		{"POST", "/actions/p1/consume", `{"pin":"` + pin + `","reason":"` + reasonBody + `"}`, key + "-2", "replayed"},
		{"POST", "/actions/p1/consume", `{"pin":"` + pin + `"}`, "", "already_used"},
		{"POST", "/actions", `{"actionId":"l1","userId":"u","pin":"` + pin + `","maxPinAttempts":1}`, "", "created"},
		{"POST", "/actions/l1/consume", `{"pin":"99999"}`, "", "invalid_pin"},
		{"POST", "/actions/l1/consume", `{"pin":"` + pin + `"}`, "", "locked"},
		{"POST", "/actions", `{"actionId":"c1","userId":"u"}`, "", "created"},
		{"POST", "/actions/c1/cancel", `{"reason":"` + reasonBody + `"}`, "", "canceled"},
		{"POST", "/actions/c1/consume", ``, "", "canceled"},
		{"POST", "/actions", `{"actionId":"n1","userId":"u","activeAt":"` + future + `"}`, "", "created"},
		{"POST", "/actions/n1/consume", ``, "", "not_active"},
		{"POST", "/actions/nope/consume", ``, "", "action_not_found"},
		{"POST", "/actions", `{"userId":"u","pin":"` + pin + `","colour":"red"}`, "", "invalid_request"},
		{"POST", "/actions", `{"actionId":"e1","userId":"u","expiresAt":"` + time.Now().Add(30*time.Second).UTC().Format(time.RFC3339Nano) + `"}`, "", "created"},
	}
	for _, s := range steps {
		var h []string
		if s.key != "" {
			h = []string{"Idempotency-Key", s.key}
		}
		r := do(t, env, s.method, s.path, s.body, h...)
		if r.Status >= 500 {
			t.Fatalf("%s %s: %d", s.method, s.path, r.Status)
		}
	}
	env.Shift(time.Minute)
	do(t, env, "POST", "/actions/e1/consume", "")
	steps = append(steps, struct{ method, path, body, key, outcome string }{"POST", "/actions/e1/consume", "", "", "expired"})

	dead := testkit.NewDeadEnv(t)
	do(t, dead, "POST", "/actions/x/consume", `{"pin":"`+pin+`"}`, "Idempotency-Key", key)
	steps = append(steps, struct{ method, path, body, key, outcome string }{"POST", "/actions/x/consume", "", key, "unavailable"})

	out := env.Log.String() + dead.Log.String()
	for _, secret := range []string{pin, payload, key, reasonBody, "test-secret-0123456789", "colour"} {
		if strings.Contains(out, secret) {
			t.Errorf("printed output contains %q", secret)
		}
	}

	var requests, emf []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not one JSON object per line: %s", line)
		}
		switch {
		case m["msg"] == "request":
			requests = append(requests, m)
		case m["_aws"] != nil:
			if err := testkit.ValidateEMF([]byte(line)); err != nil {
				t.Errorf("EMF %v: %s", err, line)
			}
			emf = append(emf, m)
		}
	}
	if len(requests) != len(steps) || len(emf) != len(steps) {
		t.Fatalf("%d request lines and %d metric lines for %d requests", len(requests), len(emf), len(steps))
	}
	hash := regexp.MustCompile(`^[0-9a-f]{12}$`)
	for i, s := range steps {
		r := requests[i]
		if r["outcome"] != s.outcome || emf[i]["Outcome"] != s.outcome || emf[i]["Route"] != r["route"] || emf[i]["Requests"] != 1.0 {
			t.Errorf("step %d (%s %s): log outcome %v, metric %v/%v, want %s", i, s.method, s.path, r["outcome"], emf[i]["Outcome"], emf[i]["Route"], s.outcome)
		}
		for _, f := range []string{"requestId", "route", "status", "latencyMs", "dynamodbRequests", "coldStart"} {
			if r[f] == nil {
				t.Errorf("step %d: no %s in %v", i, f, r)
			}
		}
		// One request per outcome, except: nothing for bad input; the SDK's
		// three tries when DynamoDB is down; and the PIN paths that take two
		// (a reused key on a PIN action counts a guess; a right PIN reserves
		// its guess, then consumes; its keyed retry finds its reservation,
		// then the consume).
		wantDB := map[string]float64{"invalid_request": 0, "unavailable": 3}[s.outcome]
		if _, special := map[string]bool{"invalid_request": true, "unavailable": true}[s.outcome]; !special {
			wantDB = 1
		}
		if i == 2 || i == 6 || i == 7 {
			wantDB = 2
		}
		if r["dynamodbRequests"] != wantDB {
			t.Errorf("step %d (%s): dynamodbRequests %v, want %v", i, s.outcome, r["dynamodbRequests"], wantDB)
		}
		if (s.key != "") != (r["idempotencyKeyHash"] != nil) || (s.key != "" && !hash.MatchString(r["idempotencyKeyHash"].(string))) {
			t.Errorf("step %d: idempotencyKeyHash %v", i, r["idempotencyKeyHash"])
		}
	}
	if requests[0]["idempotencyKeyHash"] != requests[1]["idempotencyKeyHash"] || requests[0]["idempotencyKeyHash"] == requests[6]["idempotencyKeyHash"] {
		t.Error("the key hash does not correlate retries of one key")
	}
}
