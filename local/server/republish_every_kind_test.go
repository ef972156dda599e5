package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/eventbus"
)

// TestRepublishRebuildsWhatTheStreamPublishedOfEveryKind: every kind of
// transition docs/events.md lists that the table keeps (a consume, a
// cancel, a supersede's and a cancel-all's cancels, a sweep's expiry, uses
// taken and released, a multi-use action canceled and one expired while
// uses are held, a keyed take re-sent), published by the stream publisher;
// then republish of a window holding them all. Each event republish
// publishes is one the stream published, with the same eventId, detail
// type and detail (occurredAt and the transition's own fields included),
// and each the stream published is republished: a subscriber
// de-duplicating on eventId acts once, and reads the same event either way.
func TestRepublishRebuildsWhatTheStreamPublishedOfEveryKind(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, scaled(t, func(bus string) string { return bus }))
	from := time.Now().Add(-time.Second).UTC()
	do := func(path, body string, headers ...string) {
		t.Helper()
		if r := testkit.Do(t, nil, "POST", env.URL+path, body, headers...); r.Status >= 300 {
			t.Fatalf("%s: %d %s", path, r.Status, r.Raw)
		}
	}
	soon := time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339Nano) // the sweeper runs an hour on

	do("/actions", `{"actionId":"consumed","userId":"u1","kind":"coupon","metadata":{"campaign":"bf"}}`)
	do("/actions/consumed/consume", `{"reason":"checkout 981"}`)
	do("/actions", `{"actionId":"canceled","userId":"u1"}`)
	do("/actions/canceled/cancel", `{"reason":"refund"}`)
	do("/actions", `{"actionId":"old-link","userId":"u2","kind":"login"}`)
	do("/actions", `{"actionId":"new-link","userId":"u2","kind":"login","supersede":true}`)
	do("/actions", `{"actionId":"bulk-1","userId":"u3"}`)
	do("/actions", `{"actionId":"bulk-2","userId":"u3","kind":"k"}`)
	do("/users/u3/actions/cancel", `{"reason":"account closed"}`)
	do("/actions", fmt.Sprintf(`{"actionId":"swept","userId":"u4","kind":"otp","expiresAt":%q}`, soon))
	do("/actions", `{"actionId":"lic","userId":"acme","maxUses":2,"releasable":true,"metadata":{"plan":"pro"}}`)
	do("/actions/lic/consume", `{"useId":"laptop","reason":"seat"}`, "Idempotency-Key", "take-laptop")
	do("/actions/lic/consume", `{"useId":"laptop","reason":"seat"}`, "Idempotency-Key", "take-laptop") // its answer lost: re-sent
	do("/actions/lic/uses/laptop/release", ``)
	do("/actions/lic/consume", `{"useId":"laptop"}`) // the useId again, a use of its own
	do("/actions/lic/consume", `{"useId":"phone"}`)
	do("/actions/lic/cancel", `{"reason":"contract ended"}`) // two uses held
	do("/actions", fmt.Sprintf(`{"actionId":"seats","userId":"acme","maxUses":30,"expiresAt":%q}`, soon))
	do("/actions/seats/consume", `{"useId":"desk-1"}`)
	do("/actions/seats/consume", `{"useId":"desk-2"}`)
	env.Sweeper.Now = func() time.Time { return time.Now().Add(time.Hour) }
	if res, err := env.Sweeper.Run(context.Background()); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("sweep: %+v", res)
	}
	env.Settled(t)

	streamed := localEvents(t, env)
	byID := func(evs []eventbus.Event) map[string]eventbus.Event {
		out := map[string]eventbus.Event{}
		for _, e := range evs {
			var c struct{ EventID string }
			if err := json.Unmarshal(e.Detail, &c); err != nil || c.EventID == "" {
				t.Fatalf("event without an eventId: %s (%v)", e.Detail, err)
			}
			if prev, ok := out[c.EventID]; ok && (prev.DetailType != e.DetailType || !sameJSON(prev.Detail, e.Detail)) {
				t.Fatalf("two events share the id %s:\n %s %s\n %s %s", c.EventID, prev.DetailType, prev.Detail, e.DetailType, e.Detail)
			}
			out[c.EventID] = e
		}
		return out
	}
	stream := byID(streamed)
	kinds := map[string]int{}
	for _, e := range stream {
		kinds[e.DetailType]++
	}
	want := map[string]int{"action.consumed": 1, "action.canceled": 5, "action.expired": 2, "action.used": 5, "action.use_released": 1}
	if !maps.Equal(kinds, want) {
		t.Fatalf("the stream published %v, want %v", kinds, want)
	}

	r := testkit.Do(t, nil, "POST", env.URL+"/_local/republish",
		fmt.Sprintf(`{"from":%q,"to":%q,"segments":3}`, from.Format(time.RFC3339Nano), time.Now().Add(2*time.Hour).UTC().Format(time.RFC3339Nano)))
	var res struct {
		Matched, Published int
		Undecodable        []string
	}
	if err := json.Unmarshal([]byte(r.Raw), &res); err != nil || r.Status != 200 || len(res.Undecodable) != 0 {
		t.Fatalf("republish: %d %s", r.Status, r.Raw)
	}
	again := localEvents(t, env)[len(streamed):]
	if res.Matched != len(stream) || res.Published != len(stream) || len(again) != len(stream) {
		t.Fatalf("republish matched %d, published %d, %d on the bus; the stream published %d: %s", res.Matched, res.Published, len(again), len(stream), r.Raw)
	}
	rebuilt := byID(again)
	for _, id := range slices.Sorted(maps.Keys(rebuilt)) {
		e, s := rebuilt[id], stream[id]
		switch {
		case s.DetailType == "":
			t.Errorf("republish made an event the stream never published: %s %s", e.DetailType, e.Detail)
		case s.DetailType != e.DetailType || !sameJSON(s.Detail, e.Detail):
			t.Errorf("event %s differs:\n stream    %s %s\n republish %s %s", id, s.DetailType, s.Detail, e.DetailType, e.Detail)
		}
	}
	for id, s := range stream {
		if _, ok := rebuilt[id]; !ok {
			t.Errorf("republish missed %s %s", s.DetailType, s.Detail)
		}
	}
}

// sameJSON reports whether two JSON documents hold the same value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}
