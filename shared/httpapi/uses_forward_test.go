package httpapi_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/shared/action"
)

// fillHome takes every use of the home gate of useId on releasable action
// id (maxUses 48: two gates), with other useIds of that gate, and returns
// them.
func fillHome(t *testing.T, env *testkit.Env, id, useID string) []string {
	t.Helper()
	gates := action.Gates(48)
	home := action.HomeGate(action.UseToken(useID), gates)
	var fillers []string
	for i := 0; len(fillers) < action.GateCap(48, home); i++ {
		f := fmt.Sprintf("f%d", i)
		if action.HomeGate(action.UseToken(f), gates) != home {
			continue
		}
		if r := do(t, env, "POST", "/actions/"+id+"/consume", `{"useId":"`+f+`"}`); r.Status != 200 {
			t.Fatalf("fill %s: %s", f, r.Raw)
		}
		fillers = append(fillers, f)
	}
	return fillers
}

// TestForwardsNeverStallATake: a useId whose home gate is full takes its
// use in another gate, its home gate forwarding to it. Whatever write of
// that lost its answer or failed, the next take of the useId answers at
// once, with no fault left: (a) the forward's write landed, its answer lost
// (the SDK re-sends it and meets the forward it wrote); (b) a release freed
// the use and its drop of the forward failed (500 to the write and to the
// SDK's re-sends). (Both answered 503 for 30 seconds, the forward's
// patience, while 24 uses were left.)
func TestForwardsNeverStallATake(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		fault func(*faults.Proxy)
		first string // the call the fault is on
	}{
		{"forward answer lost", func(p *faults.Proxy) { p.PassThenDrop(2, 1) }, "take"},    // record, home gate (full), forward (answer lost)
		{"forward drop failed", func(p *faults.Proxy) { p.PassThenFail(2, 3) }, "release"}, // stamp, gate write, the drop (and the SDK's 2 re-sends)
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env, proxy := proxied(t)
			create(t, env, `{"actionId":"fw","userId":"u","maxUses":48,"releasable":true}`)
			fillHome(t, env, "fw", "dev")
			take := func() *testkit.Response {
				return do(t, env, "POST", "/actions/fw/consume", `{"useId":"dev"}`, "Idempotency-Key", "fw-take")
			}
			if c.first == "release" {
				if r := take(); r.Status != 200 {
					t.Fatalf("take: %s", r.Raw)
				}
				c.fault(proxy)
				if r := do(t, env, "POST", "/actions/fw/uses/dev/release", ``); r.Status != 200 {
					t.Fatalf("release: %s", r.Raw)
				}
				proxy.PassThenFail(0, 0)
				if r := do(t, env, "POST", "/actions/fw/consume", `{"useId":"dev"}`); r.Status != 200 {
					t.Errorf("take again, no fault left: %d %s", r.Status, r.Raw)
				}
			} else {
				c.fault(proxy)
				if r := take(); r.Status != 200 {
					t.Errorf("take: %d %s", r.Status, r.Raw)
				}
			}
			if h := do(t, env, "GET", "/actions/fw", "").Body["usesHeld"]; h != 25.0 {
				t.Errorf("%v held, want 25", h)
			}
		})
	}
}

// TestRetakeAfterAForwardedReleaseIsStampedAfterIt: dev's use is in the
// gate its full home gate forwards to. Its release is slow to stamp (900
// ms), and meanwhile another useId takes in that gate: the release's gate
// write loses, and it frees the entry at its stamp all the same, behind
// that gate's clock. Once it answers, a seat
// frees in dev's home gate and dev takes again there, at once: that take
// is stamped after the release. (It was stamped up to a second before it:
// the home gate's clock knew nothing of the release.)
func TestRetakeAfterAForwardedReleaseIsStampedAfterIt(t *testing.T) {
	t.Parallel()
	var env *testkit.Env
	var armed, writes atomic.Int32
	env, _ = hooked(t, func(n int32) {
		writes.Store(n)
		if n != armed.Load() {
			return
		}
		start := time.Now()
		if r, err := testkit.Send(client, "POST", env.URL+"/actions/rh/consume", `{"useId":"z-in-d"}`); err != nil || r.Status != 200 {
			t.Errorf("z: %v %v", r, err)
		}
		time.Sleep(900*time.Millisecond - time.Since(start))
	})
	create(t, env, `{"actionId":"rh","userId":"u","maxUses":48,"releasable":true}`)
	fillers := fillHome(t, env, "rh", "dev")
	if action.HomeGate(action.UseToken("z-in-d"), 2) == action.HomeGate(action.UseToken("dev"), 2) {
		t.Fatal("z-in-d must live in the other gate")
	}
	if r := do(t, env, "POST", "/actions/rh/consume", `{"useId":"dev"}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	armed.Store(writes.Load() + 1) // the release's stamp
	rel := do(t, env, "POST", "/actions/rh/uses/dev/release", ``)
	if r := do(t, env, "POST", "/actions/rh/uses/"+fillers[0]+"/release", ``); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	again := do(t, env, "POST", "/actions/rh/consume", `{"useId":"dev"}`)
	ra, _ := time.Parse(time.RFC3339Nano, rel.Str("releasedAt"))
	ua, _ := time.Parse(time.RFC3339Nano, again.Str("usedAt"))
	if rel.Status != 200 || again.Status != 200 || !ua.After(ra) {
		t.Errorf("release %d releasedAt %s; take again %d usedAt %s: want a take stamped after the release", rel.Status, rel.Str("releasedAt"), again.Status, again.Str("usedAt"))
	}
}

// TestForwardLeftByAFailedTake: dev's home gate is full, so its take writes
// a forward and then its entry in another gate, and one of those writes
// fails for good (the SDK's re-sends too): the take answers 503 and lets go
// (a write: while DynamoDB stays down it cannot, and its hold lapses after
// 30 s).
// With no fault left, the next take of dev (the key re-sent, or another
// call) answers at once, dev holds exactly one use, and it releases. (The
// take dropped its forward though its entry had landed: dev then held two
// uses, one of them never to be released, and a key took both; a forward
// whose take had stopped held every other take of dev at 503 for 30 s.)
func TestForwardLeftByAFailedTake(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		fault func(*faults.Proxy)
		key   string // the take's key; the next take re-sends it, or sends none
	}{
		// record, home gate (full), forward, then the entry: applied, its answer and the re-sends' lost
		{"entry landed", func(p *faults.Proxy) { p.PassThenDrop(3, 3) }, ""},
		{"entry landed keyed", func(p *faults.Proxy) { p.PassThenDrop(3, 3) }, "k"},
		// the forward applied, its answer and the re-sends' lost
		{"forward landed", func(p *faults.Proxy) { p.PassThenDrop(2, 3) }, ""},
		// the entry refused 500 (nothing applied)
		{"entry failed", func(p *faults.Proxy) { p.PassThenFail(3, 3) }, ""},
		{"entry failed keyed", func(p *faults.Proxy) { p.PassThenFail(3, 3) }, "k"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env, proxy := proxied(t)
			create(t, env, `{"actionId":"fl","userId":"u","maxUses":48,"releasable":true}`)
			fillHome(t, env, "fl", "dev")
			take := func() *testkit.Response {
				if c.key == "" {
					return do(t, env, "POST", "/actions/fl/consume", `{"useId":"dev"}`)
				}
				return do(t, env, "POST", "/actions/fl/consume", `{"useId":"dev"}`, "Idempotency-Key", c.key)
			}
			c.fault(proxy)
			if r := take(); r.Status != 503 {
				t.Fatalf("the take under the fault: %d %s; want 503", r.Status, r.Raw)
			}
			proxy.PassThenFail(0, 0)
			held := func() any { return do(t, env, "GET", "/actions/fl", "").Body["usesHeld"] }
			if r := take(); r.Status != 200 || held() != 25.0 {
				t.Errorf("the next take of dev: %d %s; %v held, want 25", r.Status, r.Raw, held())
			}
			if l := do(t, env, "GET", "/actions/fl/uses?limit=100", ""); strings.Count(l.Raw, `"useId":"dev"`) != 1 {
				t.Errorf("dev listed %d times: %s", strings.Count(l.Raw, `"useId":"dev"`), l.Raw)
			}
			r1, r2 := do(t, env, "POST", "/actions/fl/uses/dev/release", ``), do(t, env, "POST", "/actions/fl/uses/dev/release", ``)
			if r1.Status != 200 || r2.Status != 404 || held() != 24.0 {
				t.Errorf("releases of dev: %d, %d; %v held, want 200, 404, 24", r1.Status, r2.Status, held())
			}
		})
	}
}

// TestTakeWaitsForAForwardInFlight: dev's home gate is full, so its take
// forwards to another gate; while that take's entry write is in flight
// (held 600 ms), a second take of dev arrives and finds the forward with
// no entry behind it yet. It waits for the first take: both answer 200
// with the one use, one use is held, and the second writes only its own
// record. (With the wait taken out, the second drops the forward and
// forwards again: 10 writes, not 6.)
func TestTakeWaitsForAForwardInFlight(t *testing.T) {
	t.Parallel()
	var env *testkit.Env
	var writes, holdAt atomic.Int32
	second := make(chan *testkit.Response, 1)
	env, _ = hooked(t, func(n int32) {
		writes.Store(n)
		if n != holdAt.Load() {
			return
		}
		go func() {
			r, err := testkit.Send(client, "POST", env.URL+"/actions/wf/consume", `{"useId":"dev"}`)
			if err != nil {
				t.Error(err)
			}
			second <- r
		}()
		time.Sleep(600 * time.Millisecond)
	})
	create(t, env, `{"actionId":"wf","userId":"u","maxUses":48,"releasable":true}`)
	fillHome(t, env, "wf", "dev")
	w0 := writes.Load()
	holdAt.Store(w0 + 4) // record, home gate (full), forward, then the entry
	first := do(t, env, "POST", "/actions/wf/consume", `{"useId":"dev"}`)
	r := <-second
	if r == nil || first.Status != 200 || r.Status != 200 || r.Str("usedAt") != first.Str("usedAt") {
		t.Fatalf("two takes of dev: %d %s; %v", first.Status, first.Raw, r)
	}
	// The first take's 4, the second's record and its finish: the second
	// drops no forward and places nothing (without the wait: 10 writes).
	if n := writes.Load() - w0; n > 6 {
		t.Errorf("%d writes, want 6: the second take did not wait for the first", n)
	}
	if h := do(t, env, "GET", "/actions/wf", "").Body["usesHeld"]; h != 25.0 {
		t.Errorf("%v held, want 25", h)
	}
}
