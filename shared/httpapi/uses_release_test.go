package httpapi_test

import (
	"encoding/json"
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
		// The same key again, or another call without a key: it finishes
		// the failed call's release and answers it, 200. (An unkeyed one
		// answered 404 use_not_found though it freed the use: the stamp was
		// the failed call's, so it counted the use as freed by another.)
		again := release()
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

// TestReleaseOnAGateBusierThanIt: while dev's use is released, before each
// of the release's writes another useId of the gate is taken and released
// (as on a busy gate: writers that started later commit first, with later
// times). The release answers 200, with one more gate write at its stamp
// (more only when its stamp goes stale meanwhile); dev taken again is
// stamped after it. (The release moved its stamp
// past the gate's clock and wrote again, losing to the next writer each
// time: 64 gate writes, 129 writes in all, then 503. On a fresh clone's make test, six useIds
// churning one gate saw it: TestReleasesKeepUpWithChurn.)
func TestReleaseOnAGateBusierThanIt(t *testing.T) {
	t.Parallel()
	var env *testkit.Env
	var armed, inside atomic.Bool
	var writes atomic.Int32 // the release's
	env, _ = hooked(t, func(int32) {
		if !armed.Load() || !inside.CompareAndSwap(false, true) {
			return // not the release's write, or another's
		}
		defer inside.Store(false)
		if writes.Add(1) > 200 {
			return
		}
		for _, call := range [][2]string{{"/actions/bz/consume", `{"useId":"other"}`}, {"/actions/bz/uses/other/release", ``}} {
			if r, err := testkit.Send(client, "POST", env.URL+call[0], call[1]); err != nil || r.Status != 200 {
				t.Errorf("%s: %v %v", call[0], r, err)
			}
		}
	})
	create(t, env, `{"actionId":"bz","userId":"u","maxUses":2,"releasable":true}`)
	take := do(t, env, "POST", "/actions/bz/consume", `{"useId":"dev"}`)
	if take.Status != 200 {
		t.Fatal(take.Raw)
	}
	armed.Store(true)
	start := time.Now()
	rel := do(t, env, "POST", "/actions/bz/uses/dev/release", ``)
	took := time.Since(start)
	armed.Store(false)
	again := do(t, env, "POST", "/actions/bz/consume", `{"useId":"dev"}`)
	if rel.Status != 200 || again.Status != 200 {
		t.Fatalf("release %d %s (after %d writes); take again %d %s", rel.Status, rel.Raw, writes.Load(), again.Status, again.Raw)
	}
	// 3 writes: its stamp, two gate writes. When the calls before its
	// writes take a second or more (a busy machine), its stamp goes stale
	// and is fenced and moved first: 2 more each time. A fence moves the
	// stamp to its own time, so the next needs another second: at most one
	// fence per second the release took, counted up (stamps are whole
	// milliseconds). (The old code lost every gate write to the calls
	// before it: 129 writes in 6 s, then 503.)
	limit := 3 + 2*int32((took+time.Second-1)/time.Second)
	t.Logf("the release sent %d writes in %s (limit %d)", writes.Load(), took.Round(time.Millisecond), limit)
	if n := writes.Load(); n > limit {
		t.Errorf("the release sent %d writes in %s, want at most %d", n, took.Round(time.Millisecond), limit)
	}
	used, _ := time.Parse(time.RFC3339Nano, take.Str("usedAt"))
	released, _ := time.Parse(time.RFC3339Nano, rel.Str("releasedAt"))
	usedAgain, _ := time.Parse(time.RFC3339Nano, again.Str("usedAt"))
	if !used.Before(released) || !released.Before(usedAgain) {
		t.Errorf("usedAt %s, releasedAt %s, used again at %s: want them in this order", take.Str("usedAt"), rel.Str("releasedAt"), again.Str("usedAt"))
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

// TestTakeAnswerLostThenReleasedAndTakenAgain: a keyed take's gate write
// lands, its answer lost; before the SDK sends it again, the use is
// released and the useId takes a use again under another key. The re-sent
// write meets the new take's entry: the take answers the use it took (its
// usedAt), and its record keeps that use, so republish makes only the
// events the stream made. (The take used to answer as the new take, and
// wrote the new take's usedAt on its record over its own: republish then
// made an action.use_released the stream never did, with the id of the new
// use's real release, which a de-duplicating subscriber then dropped.)
func TestTakeAnswerLostThenReleasedAndTakenAgain(t *testing.T) {
	t.Parallel()
	var env *testkit.Env
	var armed, writes atomic.Int32
	var rel, retake atomic.Pointer[testkit.Response]
	env, proxy := hooked(t, func(n int32) {
		writes.Store(n)
		if n != armed.Load() {
			return
		}
		if r, err := testkit.Send(client, "POST", env.URL+"/actions/lr/uses/dev/release", ``, "Idempotency-Key", "lr-rel"); err == nil {
			rel.Store(r)
		}
		if r, err := testkit.Send(client, "POST", env.URL+"/actions/lr/consume", `{"useId":"dev"}`, "Idempotency-Key", "lr-take-2"); err == nil {
			retake.Store(r)
		}
	}, testkit.WithEvents)
	create(t, env, `{"actionId":"lr","userId":"u","maxUses":2,"releasable":true}`)
	if r := do(t, env, "POST", "/actions/lr/consume", `{"useId":"warm"}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	from := time.Now().Add(-time.Second).UTC()
	armed.Store(writes.Load() + 3) // +1 the record, +2 the gate write (answer lost), +3 the SDK's re-send
	proxy.PassThenDrop(1, 1)
	take := do(t, env, "POST", "/actions/lr/consume", `{"useId":"dev"}`, "Idempotency-Key", "lr-take-1")
	r, rt := rel.Load(), retake.Load()
	if take.Status != 200 || r == nil || r.Status != 200 || rt == nil || rt.Status != 200 {
		t.Fatalf("take %s; release %v; take again %v", take.Raw, r, rt)
	}
	if take.Str("usedAt") != r.Str("usedAt") {
		t.Errorf("the take's write took the use the release freed (usedAt %s), but the take answers usedAt %s (the next take's is %s)", r.Str("usedAt"), take.Str("usedAt"), rt.Str("usedAt"))
	}
	streamed := map[string]bool{}
	for _, e := range useEventLines(t, env, "lr", 4) {
		streamed[e] = true
	}
	if p := do(t, env, "POST", "/_local/republish", fmt.Sprintf(`{"from":%q,"to":%q}`, from.Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))); p.Status != 200 {
		t.Fatalf("republish: %s", p.Raw)
	}
	env.Settled(t)
	for _, e := range useEventLines(t, env, "lr", 4) {
		if !streamed[e] {
			t.Errorf("republish made an event the stream never did: %s", e)
		}
	}
}

// useEventLines is useEvents of action id, one line each: type, useId,
// times and event id.
func useEventLines(t *testing.T, env *testkit.Env, id string, want int) []string {
	t.Helper()
	var out []string
	for _, e := range useEvents(t, env, id, want) {
		var d struct{ EventID, UseID, UsedAt, ReleasedAt string }
		_ = json.Unmarshal(e.Detail, &d)
		out = append(out, fmt.Sprintf("%s useId=%s usedAt=%s releasedAt=%s id=%s", e.DetailType, d.UseID, d.UsedAt, d.ReleasedAt, d.EventID))
	}
	return out
}

// TestReleaseNeverCommitsAfterExpiry: a release that began before the
// action's expiresAt loses its gate write to a take (the gate's clock
// passed its stamp) and is slow: its stamp moves past expiresAt, so it is
// refused expired, and the use stays held as a GET after expiresAt saw it.
// (It freed the use, released after the action expired.)
func TestReleaseNeverCommitsAfterExpiry(t *testing.T) {
	t.Parallel()
	var writes atomic.Int32
	p := newPause()
	env, _ := hooked(t, func(n int32) { writes.Store(n); p.hookFn(n) })
	defer p.resume()
	create(t, env, `{"actionId":"ex","userId":"u","maxUses":3,"releasable":true,"expiresAt":"`+time.Now().Add(6*time.Second).UTC().Format(time.RFC3339Nano)+`"}`)
	exp, _ := time.Parse(time.RFC3339Nano, do(t, env, "GET", "/actions/ex", "").Str("expiresAt"))
	if r := do(t, env, "POST", "/actions/ex/consume", `{"useId":"dev"}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	p.at.Store(writes.Load() + 2) // +1 the release's stamp, +2 its gate write
	var rel *testkit.Response
	var wg sync.WaitGroup
	wg.Go(func() { rel = do(t, env, "POST", "/actions/ex/uses/dev/release", ``) })
	<-p.reached
	if r := do(t, env, "POST", "/actions/ex/consume", `{"useId":"mover"}`); r.Status != 200 { // the gate's clock passes the stamp
		t.Fatal(r.Raw)
	}
	time.Sleep(time.Until(exp) + 300*time.Millisecond)
	seen := do(t, env, "GET", "/actions/ex", "")
	p.resume()
	wg.Wait()
	at, _ := time.Parse(time.RFC3339Nano, rel.Str("releasedAt"))
	if rel.Status == 200 && !at.Before(exp) {
		t.Errorf("released at %s, after the action expired at %s (a GET then saw it %s with %v held)", rel.Str("releasedAt"), exp.Format(time.RFC3339Nano), seen.Str("state"), seen.Body["usesHeld"])
	}
	if rel.Status != 200 && (rel.Status != 410 || rel.Str("error") != "expired") {
		t.Errorf("release: %d %s; want 200 before expiresAt or 410 expired", rel.Status, rel.Raw)
	}
}

// TestRefusedByACancelReplaysByteForByte: a keyed take and a keyed release
// read the action before a cancel (the instance's copy) and are refused by
// the gate the cancel closed: the refusal names canceledAt, and re-sent
// with the key it answers the same body. (The first answer had no
// canceledAt, the replay had one.)
func TestRefusedByACancelReplaysByteForByte(t *testing.T) {
	t.Parallel()
	var env *testkit.Env
	var armed, writes atomic.Int32
	var id atomic.Value
	env, _ = hooked(t, func(n int32) {
		writes.Store(n)
		if n == armed.Load() {
			if r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id.Load().(string)+"/cancel", `{}`); err != nil || r.Status != 200 {
				t.Errorf("cancel: %v %v", r, err)
			}
		}
	})
	for _, c := range []struct{ name, path, body string }{
		{"take", "/consume", `{"useId":"new"}`},
		{"release", "/uses/dev/release", ``},
	} {
		a := "cr-" + c.name
		id.Store(a)
		create(t, env, `{"actionId":"`+a+`","userId":"u","maxUses":3,"releasable":true}`)
		if r := do(t, env, "POST", "/actions/"+a+"/consume", `{"useId":"dev"}`); r.Status != 200 { // the action read (and kept)
			t.Fatal(r.Raw)
		}
		armed.Store(writes.Load() + 1) // the call's record: the cancel runs before the call's next write
		first := do(t, env, "POST", "/actions/"+a+c.path, c.body, "Idempotency-Key", a+"-key")
		armed.Store(0)
		again := do(t, env, "POST", "/actions/"+a+c.path, c.body, "Idempotency-Key", a+"-key")
		if first.Status != 410 || first.Str("canceledAt") == "" ||
			requestIDField.ReplaceAllString(again.Raw, "") != requestIDField.ReplaceAllString(first.Raw, "") {
			t.Errorf("%s: first %d %s; re-sent %d %s", c.name, first.Status, first.Raw, again.Status, again.Raw)
		}
	}
}
