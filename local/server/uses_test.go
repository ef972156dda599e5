package server_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestUseEvents: each use taken is one action.used, each release one
// action.use_released; a repeated take or release publishes nothing; a
// useId that takes a use again after its release is a new event id. A
// multi-use action is never action.consumed; its cancel is as today.
func TestUseEvents(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.WithEvents)
	do := func(method, path, body string) {
		if r := testkit.Do(t, nil, method, env.URL+path, body); r.Status >= 300 {
			t.Fatalf("%s %s: %s", method, path, r.Raw)
		}
	}
	do("POST", "/actions", `{"actionId":"seats","userId":"acme","kind":"licence","maxUses":2,"releasable":true,"payload":{"key":"s3cr3t"}}`)
	do("POST", "/actions/seats/consume", `{"useId":"laptop","reason":"activate"}`)
	do("POST", "/actions/seats/consume", `{"useId":"laptop"}`) // the same use: no write, no event
	do("POST", "/actions/seats/consume", `{"useId":"phone"}`)
	do("POST", "/actions/seats/uses/laptop/release", ``)
	if r := testkit.Do(t, nil, "POST", env.URL+"/actions/seats/uses/laptop/release", ``); r.Status != 404 { // released already: no event
		t.Fatalf("release again: %s", r.Raw)
	}
	do("POST", "/actions/seats/consume", `{"useId":"laptop"}`)
	do("POST", "/actions/seats/cancel", ``)

	var evs []map[string]any
	var types []string
	got := waitEvents(t, env, 5)
	for _, e := range got {
		var d map[string]any
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(e.Detail), "s3cr3t") {
			t.Fatalf("the payload reached an event: %s", e.Detail)
		}
		evs = append(evs, d)
		types = append(types, e.DetailType+" "+str(d["useId"]))
	}
	want := "[action.used laptop action.used phone action.use_released laptop action.used laptop action.canceled ]"
	if got := strings.Join(strings.Fields(strings.Join(types, " ")), " "); "["+got+" ]" != want {
		t.Fatalf("events: %v, want %s", types, want)
	}
	ids := map[string]bool{}
	for _, d := range evs {
		ids[str(d["eventId"])] = true
	}
	if len(ids) != 5 {
		t.Fatalf("event ids are not one per transition: %v", evs)
	}
	if evs[0]["usesHeld"] != nil || evs[0]["maxUses"] != 2.0 || evs[0]["reason"] != "activate" || evs[3]["reason"] != nil ||
		evs[2]["usedAt"] != evs[0]["usedAt"] || str(evs[2]["releasedAt"]) == "" {
		t.Fatalf("event details: %v", evs)
	}
}

func str(v any) string { s, _ := v.(string); return s }
