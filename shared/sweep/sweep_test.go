package sweep_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/sweep"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func create(t *testing.T, env *testkit.Env, id string, expiresAt time.Time) {
	t.Helper()
	r := testkit.Do(t, nil, "POST", env.URL+"/actions",
		fmt.Sprintf(`{"actionId":%q,"userId":"u","expiresAt":%q}`, id, expiresAt.UTC().Format(time.RFC3339Nano)))
	if r.Status != 201 {
		t.Fatalf("create %s: %d %s", id, r.Status, r.Raw)
	}
}

func sweepAt(t *testing.T, env *testkit.Env, at time.Time) sweep.Result {
	t.Helper()
	env.Sweeper.Now = func() time.Time { return at }
	r, err := env.Sweeper.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSweep: only open actions past expiresAt are marked, each with one
// conditional UpdateItem; finished actions left the index with the write
// that finished them; a second sweep finds nothing.
func TestSweep(t *testing.T) {
	env := testkit.NewEnv(t)
	now := time.Now()
	soon, later := now.Add(time.Hour), now.Add(48*time.Hour)
	for _, id := range []string{"due", "due-locked", "consumed", "canceled"} {
		create(t, env, id, soon)
	}
	create(t, env, "not-due", later)
	testkit.Do(t, nil, "POST", env.URL+"/actions", fmt.Sprintf(`{"actionId":"due-pin","userId":"u","pin":"1234","maxPinAttempts":1,"expiresAt":%q}`, soon.UTC().Format(time.RFC3339Nano)))
	testkit.Do(t, nil, "POST", env.URL+"/actions/due-pin/consume", `{"pin":"0000"}`) // locks it: still open, so it expires
	testkit.Do(t, nil, "POST", env.URL+"/actions/consumed/consume", "")
	testkit.Do(t, nil, "POST", env.URL+"/actions/canceled/cancel", "")
	env.Counter.Take()

	at := soon.Add(time.Second)
	r := sweepAt(t, env, at)
	if r.Due != 3 || r.Expired != 3 || r.Finished != 0 || !r.Complete {
		t.Fatalf("sweep: %+v, want 3 due and expired", r)
	}
	for _, tot := range env.Metrics.Totals() {
		if tot.Dimensions["Function"] != "sweeper" {
			continue
		}
		if (tot.Metric == "ActionsExpired" && tot.Sum != 3) || (tot.Metric == "ExpiryLag" && tot.Max != 1000) {
			t.Errorf("sweeper metric %+v (want 3 expired, lag 1000 ms)", tot)
		}
	}
	ops := env.Counter.Take()
	if ops["Query"] != store.DefaultExpiryShards || ops["UpdateItem"] != 3 || len(ops) != 2 {
		t.Errorf("requests %v, want %d Query (one per shard) and 3 UpdateItem", ops, store.DefaultExpiryShards)
	}
	for id, want := range map[string]string{"due": "expired", "due-locked": "expired", "due-pin": "expired", "consumed": "consumed", "canceled": "expired", "not-due": "active"} {
		g := testkit.Do(t, nil, "GET", env.URL+"/actions/"+id, "")
		expiredAt := g.Str("expiredAt")
		if g.Str("state") != want || (want == "expired" && id != "canceled") != (expiredAt != "") {
			t.Errorf("%s: state %q expiredAt %q", id, g.Str("state"), expiredAt)
		}
		if id == "due" && expiredAt != store.FormatTime(at) {
			t.Errorf("expiredAt %s, want the sweep's time %s", expiredAt, store.FormatTime(at))
		}
	}
	// Marked expired: consume and cancel answer 410 expired for the whole retention.
	env.Shift(-time.Hour) // even a consumer whose clock is behind
	if c := testkit.Do(t, nil, "POST", env.URL+"/actions/due/consume", ""); c.Status != 410 || c.Str("error") != "expired" {
		t.Errorf("consume after sweep: %d %s", c.Status, c.Raw)
	}
	if c := testkit.Do(t, nil, "POST", env.URL+"/actions/due/cancel", ""); c.Status != 410 || c.Str("error") != "expired" {
		t.Errorf("cancel after sweep: %d %s", c.Status, c.Raw)
	}
	env.Shift(0)

	if r := sweepAt(t, env, at.Add(time.Minute)); r.Due != 0 || r.Expired != 0 {
		t.Errorf("second sweep: %+v, want nothing", r)
	}
	if r := sweepAt(t, env, later); r.Expired != 1 {
		t.Errorf("sweep at the later expiry: %+v", r)
	}
}

// TestConsumeRacesSweep: 200 actions, each consumed by a client whose clock
// says just before expiresAt while three overlapping sweeps whose clock says
// just after try to expire them. Each action ends consumed or expired, never
// both, and the stream gives exactly one event for it.
func TestConsumeRacesSweep(t *testing.T) {
	env := testkit.NewEnv(t, testkit.WithEvents)
	const n = 200
	expiresAt := action.Millis(time.Now().Add(time.Hour))
	for i := range n {
		create(t, env, fmt.Sprintf("r%03d", i), expiresAt)
	}
	env.Shift(time.Until(expiresAt) - 20*time.Second) // consumers: 20 s before expiry
	env.Sweeper.Now = func() time.Time { return expiresAt.Add(time.Millisecond) }

	start := make(chan struct{})
	var wg sync.WaitGroup
	status := make([]int, n)
	for i := range n {
		wg.Go(func() {
			<-start
			status[i] = testkit.Do(t, nil, "POST", env.URL+fmt.Sprintf("/actions/r%03d/consume", i), "").Status
		})
	}
	results := make([]sweep.Result, 3)
	for i := range results {
		wg.Go(func() {
			<-start
			r, err := env.Sweeper.Run(context.Background())
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		})
	}
	close(start)
	wg.Wait()

	consumed, expired := 0, 0
	for i := range n {
		a, err := env.Sweeper.Store.Get(context.Background(), "", fmt.Sprintf("r%03d", i))
		if err != nil {
			t.Fatal(err)
		}
		isC, isE := !a.ConsumedAt.IsZero(), !a.ExpiredAt.IsZero()
		if isC == isE {
			t.Fatalf("r%03d: consumed %v and expired %v", i, isC, isE)
		}
		if want := map[bool]int{true: 200, false: 410}[isC]; status[i] != want {
			t.Errorf("r%03d: consume answered %d but the action is consumed=%v", i, status[i], isC)
		}
		if isC {
			consumed++
		} else {
			expired++
		}
	}
	sweptTotal := 0
	for _, r := range results {
		sweptTotal += r.Expired
	}
	if sweptTotal != expired {
		t.Errorf("sweeps report %d expired, table has %d", sweptTotal, expired)
	}
	t.Logf("200 races: %d consumed, %d expired; sweeps %+v", consumed, expired, results)

	// Exactly one event per action.
	deadline := time.Now().Add(15 * time.Second)
	for len(env.Bus.Events()) < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	perAction := map[string][]string{}
	for _, e := range env.Bus.Events() {
		var d struct{ ActionID string }
		json.Unmarshal(e.Detail, &d)
		perAction[d.ActionID] = append(perAction[d.ActionID], e.DetailType)
	}
	if len(perAction) != n {
		t.Errorf("events for %d actions, want %d", len(perAction), n)
	}
	for id, types := range perAction {
		if len(types) != 1 {
			t.Errorf("%s: events %v, want exactly one", id, types)
		}
	}
}

// TestTenThousandInOneMinute: 10,000 actions expiring within the same
// minute are all marked by one sweep, within its budget, each once.
func TestTenThousandInOneMinute(t *testing.T) {
	env := testkit.NewEnv(t)
	st := env.Sweeper.Store
	const n = 10_000
	minute := action.Millis(time.Now().Add(time.Hour)).Truncate(time.Minute)
	created := time.Now()
	var wg sync.WaitGroup
	ids := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range ids {
				now := action.Millis(time.Now())
				_, err := st.Create(context.Background(), &action.Action{
					ID: fmt.Sprintf("m%05d", i), UserID: "u", CreatedAt: now, ActiveAt: now,
					ExpiresAt: minute.Add(time.Duration(i%60_000) * time.Millisecond * 6),
				}, nil)
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range n {
		ids <- i
	}
	close(ids)
	wg.Wait()
	t.Logf("created %d actions in %s", n, time.Since(created).Round(time.Millisecond))
	env.Counter.Take()

	r := sweepAt(t, env, minute.Add(time.Minute))
	ops := env.Counter.Take()
	t.Logf("one sweep: %+v; requests %v", r, ops)
	if r.Expired != n || r.Due != n || !r.Complete {
		t.Fatalf("sweep: %+v, want all %d expired within the budget", r, n)
	}
	if ops["UpdateItem"] != n {
		t.Errorf("%d UpdateItem for %d actions", ops["UpdateItem"], n)
	}
	if again := sweepAt(t, env, minute.Add(2*time.Minute)); again.Due != 0 {
		t.Errorf("second sweep found %d", again.Due)
	}
}

// TestExpiredEventLocally: with the local server's sweeper running every
// second, an action expiring in 2 s gives exactly one action.expired at
// /_local/events within 10 s.
func TestExpiredEventLocally(t *testing.T) {
	env := testkit.NewEnv(t, testkit.WithEvents, func(o *server.Options) { o.SweepEvery = time.Second })
	expiresAt := action.Millis(time.Now().Add(2 * time.Second))
	create(t, env, "soon", expiresAt)
	deadline := expiresAt.Add(10 * time.Second)
	for len(env.Bus.Events()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	lag := time.Since(expiresAt)
	time.Sleep(2500 * time.Millisecond) // two more sweeps: nothing more may come
	evs := env.Bus.Events()
	if len(evs) != 1 || evs[0].DetailType != "action.expired" {
		t.Fatalf("events %+v, want exactly one action.expired", evs)
	}
	var d map[string]any
	json.Unmarshal(evs[0].Detail, &d)
	if d["actionId"] != "soon" || d["detectedBy"] != "sweep" || d["expiresAt"] != store.FormatTime(expiresAt) {
		t.Errorf("detail %v", d)
	}
	t.Logf("action.expired at /_local/events %s after expiresAt", lag.Round(time.Millisecond))
}
