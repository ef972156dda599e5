package server_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestRepublishWindowBoundsAreExactBelowAMillisecond: republish rebuilds
// the events of the transitions at t with from ≤ t < to
// (docs/operating.md, "Republish"), and the window's bounds are RFC 3339
// times of any precision (to defaults to now, in nanoseconds), while a
// transition's time has milliseconds. A bound inside a millisecond is
// therefore no reason to miss or add a transition of that millisecond: a
// consume, a take and a release at t are in [t-1s, t+0.5ms) and not in
// [t+0.5ms, t+1s), each kind alike.
func TestRepublishWindowBoundsAreExactBelowAMillisecond(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, scaled(t, func(bus string) string { return bus }))
	do := func(path, body string) *testkit.Response {
		t.Helper()
		r := testkit.Do(t, nil, "POST", env.URL+path, body)
		if r.Status >= 300 {
			t.Fatalf("%s: %d %s", path, r.Status, r.Raw)
		}
		return r
	}
	at := func(r *testkit.Response, field string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, r.Str(field))
		if err != nil {
			t.Fatalf("%s of %s: %v", field, r.Raw, err)
		}
		return v
	}
	do("/actions", `{"actionId":"one","userId":"u"}`)
	consumedAt := at(do("/actions/one/consume", `{}`), "consumedAt")
	do("/actions", `{"actionId":"lic","userId":"u","maxUses":2,"releasable":true}`)
	usedAt := at(do("/actions/lic/consume", `{"useId":"dev"}`), "usedAt")
	released := do("/actions/lic/uses/dev/release", ``)
	releasedAt := at(released, "releasedAt")
	env.Settled(t)

	// republish returns the detail types republish published for the window.
	republish := func(from, to time.Time) []string {
		t.Helper()
		before := len(localEvents(t, env))
		r := testkit.Do(t, nil, "POST", env.URL+"/_local/republish",
			fmt.Sprintf(`{"from":%q,"to":%q}`, from.UTC().Format(time.RFC3339Nano), to.UTC().Format(time.RFC3339Nano)))
		var res struct{ Matched, Published int }
		if err := json.Unmarshal([]byte(r.Raw), &res); err != nil || r.Status != 200 || res.Matched != res.Published {
			t.Fatalf("republish [%s, %s): %d %s", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), r.Status, r.Raw)
		}
		env.Settled(t)
		var kinds []string
		for _, e := range localEvents(t, env)[before:] {
			kinds = append(kinds, e.DetailType)
		}
		if len(kinds) != res.Published {
			t.Fatalf("%d events on the bus after republish, which published %d", len(kinds), res.Published)
		}
		slices.Sort(kinds)
		return kinds
	}
	half := 500 * time.Microsecond
	for _, tc := range []struct {
		kind string
		at   time.Time
	}{{"action.consumed", consumedAt}, {"action.used", usedAt}, {"action.use_released", releasedAt}} {
		if got := republish(tc.at.Add(-time.Second), tc.at.Add(half)); !slices.Contains(got, tc.kind) {
			t.Errorf("%s at %s: republish of [at-1s, at+0.5ms) gave %v, without it (at < to)", tc.kind, tc.at.Format(time.RFC3339Nano), got)
		}
		if got := republish(tc.at.Add(half), tc.at.Add(time.Second)); slices.Contains(got, tc.kind) {
			t.Errorf("%s at %s: republish of [at+0.5ms, at+1s) gave %v, with it (at < from)", tc.kind, tc.at.Format(time.RFC3339Nano), got)
		}
	}
}
