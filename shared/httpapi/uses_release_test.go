package httpapi_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/shared/action"
)

// TestTakeAnswerLostThenReleased: a keyed take's gate write lands but its
// answer is lost; before the SDK sends it again, a keyed release frees the
// use. The take's re-sent write finds its use released (stamped on its
// record) and takes no second one: the take answers the use it took (its
// usedAt), its re-sends replay that, the release's re-sends replay the
// release, and a later release of the useId finds nothing to free. (The
// re-sent write used to take a second use under a later time: one call,
// two uses, and a later release then moved the first release's time.)
func TestTakeAnswerLostThenReleased(t *testing.T) {
	t.Parallel()
	var env *testkit.Env
	var armed, writes atomic.Int32
	var rel atomic.Pointer[testkit.Response]
	env, proxy := hooked(t, func(n int32) {
		writes.Store(n)
		if n != armed.Load() {
			return
		}
		// The take's gate write applied, its answer lost: the keyed release
		// comes before the SDK sends the write again.
		if r, err := testkit.Send(client, "POST", env.URL+"/actions/sr/uses/dev/release", ``, "Idempotency-Key", "sr-rel"); err == nil {
			rel.Store(r)
		}
	})
	create(t, env, `{"actionId":"sr","userId":"u","maxUses":2,"releasable":true}`)
	if r := do(t, env, "POST", "/actions/sr/consume", `{"useId":"warm"}`); r.Status != 200 { // the action read once
		t.Fatalf("warm: %s", r.Raw)
	}
	armed.Store(writes.Load() + 3) // +1 the take's record, +2 its gate write (answer lost), +3 the SDK's re-send
	proxy.PassThenDrop(1, 1)
	take := do(t, env, "POST", "/actions/sr/consume", `{"useId":"dev"}`, "Idempotency-Key", "sr-take")
	first := rel.Load()
	if take.Status != 200 || first == nil || first.Status != 200 {
		t.Fatalf("take %s; release %v", take.Raw, first)
	}
	held := func() any { return do(t, env, "GET", "/actions/sr", "").Body["usesHeld"] }
	if h := held(); h != 1.0 || take.Str("usedAt") != first.Str("usedAt") {
		t.Fatalf("%v held (want 1: warm's); the take answered usedAt %s, the release freed the use taken at %s", h, take.Str("usedAt"), first.Str("usedAt"))
	}
	replays := func(r, first *testkit.Response, what string) {
		if requestIDField.ReplaceAllString(r.Raw, "") != requestIDField.ReplaceAllString(first.Raw, "") || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s: %d %s (replayed %q); first %s", what, r.Status, r.Raw, r.Header.Get("Idempotent-Replayed"), first.Raw)
		}
	}
	replays(do(t, env, "POST", "/actions/sr/consume", `{"useId":"dev"}`, "Idempotency-Key", "sr-take"), take, "the take re-sent")
	replays(do(t, env, "POST", "/actions/sr/uses/dev/release", ``, "Idempotency-Key", "sr-rel"), first, "the release re-sent")
	if r := do(t, env, "POST", "/actions/sr/uses/dev/release", ``); r.Status != 404 || held() != 1.0 {
		t.Errorf("another release: %d %s, %v held", r.Status, r.Raw, held())
	}
	replays(do(t, env, "POST", "/actions/sr/uses/dev/release", ``, "Idempotency-Key", "sr-rel"), first, "the release re-sent at the end")
}

// TestForwardedUseTakenAgainAfterItsRelease: a releasable action's useId
// whose home gate is full takes its use in another gate (its home gate
// holds a forward to it); released, it takes a use again at once. (The
// release used to leave the forward behind, and the take again answered
// 503 for 30 seconds while 24 uses were left.)
func TestForwardedUseTakenAgainAfterItsRelease(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"fw","userId":"u","maxUses":48,"releasable":true}`)
	home := action.HomeGate(action.UseToken("dev"), action.Gates(48))
	for i, filled := 0, 0; filled < action.GateCap(48, home); i++ {
		id := fmt.Sprintf("f%d", i)
		if action.HomeGate(action.UseToken(id), action.Gates(48)) != home {
			continue
		}
		if r := do(t, env, "POST", "/actions/fw/consume", `{"useId":"`+id+`"}`); r.Status != 200 {
			t.Fatalf("fill %s: %s", id, r.Raw)
		}
		filled++
	}
	for round := range 3 {
		if r := do(t, env, "POST", "/actions/fw/consume", `{"useId":"dev"}`); r.Status != 200 {
			t.Fatalf("round %d: take of dev (its home gate full): %d %s", round, r.Status, r.Raw)
		}
		if r := do(t, env, "POST", "/actions/fw/uses/dev/release", ``); r.Status != 200 {
			t.Fatalf("round %d: release of dev: %d %s", round, r.Status, r.Raw)
		}
	}
}

// TestFinishedReleaseIsStampedWhenItCommits: a release whose gate write
// failed (503) leaves its stamp on the take's record and the use held; a
// release sent later finishes it. Its releasedAt is not before a listing
// that saw the use still held, whether it is the same key sent again or
// another call. (It used to be the failed call's time, seconds earlier.)
func TestFinishedReleaseIsStampedWhenItCommits(t *testing.T) {
	t.Parallel()
	var writes, failAt atomic.Int32
	var proxy *faults.Proxy
	env, proxy := hooked(t, func(n int32) {
		writes.Store(n)
		if n == failAt.Load() {
			proxy.Down(true)
		}
	})
	for _, key := range []string{"", "rel"} {
		id := "past" + key
		create(t, env, `{"actionId":"`+id+`","userId":"u","maxUses":2,"releasable":true}`)
		if r := do(t, env, "POST", "/actions/"+id+"/consume", `{"useId":"dev"}`); r.Status != 200 {
			t.Fatalf("take: %s", r.Raw)
		}
		release := func() *testkit.Response {
			if key == "" {
				return do(t, env, "POST", "/actions/"+id+"/uses/dev/release", ``)
			}
			return do(t, env, "POST", "/actions/"+id+"/uses/dev/release", ``, "Idempotency-Key", key)
		}
		failAt.Store(writes.Load() + 2) // the release's gate write (its stamp landed), or a keyed one's stamp
		if key != "" {
			failAt.Add(1)
		}
		r := release()
		proxy.Down(false)
		failAt.Store(0)
		if r.Status != 503 {
			t.Fatalf("%q: the release with its gate write failing: %d %s", key, r.Status, r.Raw)
		}
		time.Sleep(1100 * time.Millisecond) // the stamp grows older than a second
		seen := time.Now()
		if l := do(t, env, "GET", "/actions/"+id+"/uses", ""); !strings.Contains(l.Raw, `"useId":"dev"`) {
			t.Fatalf("%q: the listing after the failed release: %s", key, l.Raw)
		}
		// The same key again, or another call (keyed, to be told the time:
		// it finishes the failed call's release and found it made).
		var again *testkit.Response
		if key == "" {
			again = do(t, env, "POST", "/actions/"+id+"/uses/dev/release", ``, "Idempotency-Key", "after")
		} else {
			again = release()
		}
		at, err := time.Parse(time.RFC3339Nano, again.Str("releasedAt"))
		if again.Status != 200 || err != nil || at.Before(seen.Truncate(time.Millisecond)) {
			t.Errorf("%q: the release sent again: %d %s; a listing saw the use held at %s", key, again.Status, again.Raw, seen.UTC().Format(time.RFC3339Nano))
		}
		if l := do(t, env, "GET", "/actions/"+id+"/uses", ""); strings.Contains(l.Raw, `"useId":"dev"`) {
			t.Errorf("%q: still held after the release: %s", key, l.Raw)
		}
	}
}

// TestReleasesKeepUpWithChurn: six useIds each take and release a use 40
// times, as fast as they can, on one gate: no call answers 503, though
// every write to the gate must carry a later time than the one before. (A
// release that lost to another write moved its time just past the gate's
// last one, often already in the past, and lost again: on the code before
// the fix, 10 of 494 calls answered 503 after 64 tries.)
func TestReleasesKeepUpWithChurn(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"cu","userId":"u","maxUses":24,"releasable":true}`)
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			u := fmt.Sprintf("o%d", w)
			for range 40 {
				for _, call := range [][2]string{{"/actions/cu/consume", `{"useId":"` + u + `"}`}, {"/actions/cu/uses/" + u + "/release", ``}} {
					r, err := testkit.Send(client, "POST", env.URL+call[0], call[1])
					calls.Add(1)
					if err != nil || r.Status != 200 {
						failed.Add(1)
						t.Logf("%s: %v %v", call[0], r, err)
					}
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d of %d takes and releases did not answer 200", failed.Load(), calls.Load())
	for _, l := range strings.Split(env.Log.String(), "\n") {
		if strings.Contains(l, `"status":503`) {
			t.Log(l)
		}
	}
	if failed.Load() > 0 {
		t.Fail()
	}
}

// TestReleaseBeforeTheCancelClosesItsGate: a cancel closes the action's
// gates before its own write; a release sent after the cancel began, which
// commits before the cancel closes its gate, is stamped before the cancel:
// releasedAt < canceledAt. (canceledAt came after the uses the gates held,
// not after the releases they carried: a release could be stamped after the
// cancel that closed the action.)
func TestReleaseBeforeTheCancelClosesItsGate(t *testing.T) {
	t.Parallel()
	var env *testkit.Env
	var armed atomic.Int32
	var rel atomic.Pointer[testkit.Response]
	var writes atomic.Int32
	env, _ = hooked(t, func(n int32) {
		writes.Store(n)
		if n != armed.Load() {
			return
		}
		time.Sleep(5 * time.Millisecond) // the release starts after the cancel did
		if r, err := testkit.Send(client, "POST", env.URL+"/actions/rc/uses/dev/release", ``); err == nil {
			rel.Store(r)
		}
	})
	create(t, env, `{"actionId":"rc","userId":"u","maxUses":2,"releasable":true}`)
	if r := do(t, env, "POST", "/actions/rc/consume", `{"useId":"dev"}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	armed.Store(writes.Load() + 1) // the cancel's first write: closing the gate
	c := do(t, env, "POST", "/actions/rc/cancel", `{"reason":"revoked"}`)
	r := rel.Load()
	if c.Status != 200 || r == nil || r.Status != 200 {
		t.Fatalf("cancel %d %s; release %v", c.Status, c.Raw, r)
	}
	released, err1 := time.Parse(time.RFC3339Nano, r.Str("releasedAt"))
	canceled, err2 := time.Parse(time.RFC3339Nano, c.Str("canceledAt"))
	if err1 != nil || err2 != nil || !released.Before(canceled) {
		t.Fatalf("releasedAt %s is not before canceledAt %s", r.Str("releasedAt"), c.Str("canceledAt"))
	}
}
