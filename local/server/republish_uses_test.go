package server_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/eventbus"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
)

// useEventIDs are the ids of the action.used and action.use_released
// events among evs, by id (detail type and useId as value).
func useEventIDs(evs []eventbus.Event) map[string]string {
	out := map[string]string{}
	for _, e := range evs {
		var d struct{ EventID, UseID string }
		if (e.DetailType == "action.used" || e.DetailType == "action.use_released") && json.Unmarshal(e.Detail, &d) == nil {
			out[d.EventID] = e.DetailType + " " + d.UseID
		}
	}
	return out
}

// TestRepublishUses: uses are taken and released on a licence and a coupon,
// first with their events delivered, then while the bus loses every event.
// Republishing the window rebuilds every action.used and action.use_released
// from the gates and the use records, with the very ids the stream gave the
// delivered ones: a de-duplicating subscriber then has each transition once.
func TestRepublishUses(t *testing.T) {
	t.Parallel()
	var proxy *faults.Proxy
	env := testkit.NewEnv(t, scaled(t, func(bus string) string {
		var err error
		if proxy, err = faults.Start(bus, faults.Rates{}, 5, "PutEvents"); err != nil {
			t.Fatal(err)
		}
		return proxy.URL
	}))
	t.Cleanup(proxy.Close)
	from := time.Now().Add(-time.Second).UTC()
	do := func(path, body string) {
		if r := testkit.Do(t, nil, "POST", env.URL+path, body); r.Status >= 300 {
			t.Fatalf("%s: %s", path, r.Raw)
		}
	}
	do("/actions", `{"actionId":"lic","userId":"acme","maxUses":2,"releasable":true}`)
	do("/actions", `{"actionId":"coupon","userId":"shop","maxUses":50}`)
	cycle := func(i int) {
		do("/actions/lic/consume", `{"useId":"laptop"}`)
		do("/actions/lic/consume", `{"useId":"phone"}`)
		do("/actions/lic/uses/laptop/release", ``)
		do("/actions/lic/uses/phone/release", ``)
		do("/actions/coupon/consume", fmt.Sprintf(`{"useId":"buyer-%d"}`, i))
	}
	for i := range 2 {
		cycle(i)
	}
	delivered := useEventIDs(waitDistinct(t, env, 10))
	if len(delivered) != 10 {
		t.Fatalf("%d use events delivered, want 10", len(delivered))
	}
	proxy.Lose(true)
	for i := 2; i < 5; i++ {
		cycle(i)
	}
	do("/actions/lic/consume", `{"useId":"laptop"}`) // one use left held
	env.Settled(t)                                   // the stream publisher has "published" them into the void
	proxy.Lose(false)
	if n := len(useEventIDs(localEvents(t, env))); n != 10 {
		t.Fatalf("%d use events before republish, want the 10 delivered", n)
	}
	r := testkit.Do(t, nil, "POST", env.URL+"/_local/republish",
		fmt.Sprintf(`{"from":%q,"to":%q,"segments":4}`, from.Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano)))
	var res struct{ Matched, Published int }
	if err := json.Unmarshal([]byte(r.Raw), &res); r.Status != 200 || err != nil || res.Matched == 0 || res.Matched != res.Published {
		t.Fatalf("republish (every event it matched published): %s", r.Raw)
	}
	all := useEventIDs(waitDistinct(t, env, 26))
	if len(all) != 26 {
		t.Fatalf("%d distinct use events after republish, want 26 (5 cycles × 5 transitions and the last take): %v", len(all), slices.Sorted(maps.Values(all)))
	}
	for id, what := range delivered {
		if all[id] != what {
			t.Fatalf("delivered %s (%s) was republished under another id", id, what)
		}
	}
	t.Logf("republish rebuilt %d use events (%d had been lost), the delivered ones under their ids: %s", len(all), len(all)-len(delivered), r.Raw)
}

// TestRepublishSkipsAReleaseThatFailed: a release stamps the take's record
// before its gate write frees the use; when that write fails (the call
// answers 503) the use is still held. Republishing the window rebuilds the
// use's action.used and no action.use_released: a stamp on a take's record
// is a release only once the entry has left its gate.
func TestRepublishSkipsAReleaseThatFailed(t *testing.T) {
	t.Parallel()
	db, err := faults.Start(testkit.DynamoDB(t), faults.Rates{}, 6, "UpdateItem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	withEvents := scaled(t, func(bus string) string { return bus })
	env := testkit.NewEnv(t, func(o *server.Options) {
		withEvents(o)
		o.AWS.BaseEndpoint = aws.String(db.URL)
	})
	from := time.Now().Add(-time.Second).UTC()
	if r := testkit.Do(t, nil, "POST", env.URL+"/actions", `{"actionId":"lic","userId":"acme","maxUses":2,"releasable":true}`); r.Status != 201 {
		t.Fatal(r.Raw)
	}
	if r := testkit.Do(t, nil, "POST", env.URL+"/actions/lic/consume", `{"useId":"dev"}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	db.PassThenFail(1, 3) // the stamp lands; the gate write and the SDK's 2 retries of it fail
	if r := testkit.Do(t, nil, "POST", env.URL+"/actions/lic/uses/dev/release", ``); r.Status != 503 {
		t.Fatalf("release with its gate write failing: %d %s", r.Status, r.Raw)
	}
	db.PassThenFail(0, 0)
	env.Settled(t)
	r := testkit.Do(t, nil, "POST", env.URL+"/_local/republish",
		fmt.Sprintf(`{"from":%q,"to":%q,"segments":2}`, from.Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano)))
	if r.Status != 200 {
		t.Fatalf("republish: %s", r.Raw)
	}
	env.Settled(t)
	kinds := map[string]int{}
	for _, what := range useEventIDs(localEvents(t, env)) {
		kinds[what]++
	}
	if kinds["action.used dev"] != 1 || kinds["action.use_released dev"] != 0 {
		t.Fatalf("use events after republish: %v, want one action.used of dev and no action.use_released", kinds)
	}
}
