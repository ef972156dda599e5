package httpapi_test

// A release that later writes beat to its gate frees its entry at its
// stamp in a second write, conditional on the gate's clock being at most a
// second past the stamp (a fence carries it further).

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
)

func ts(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return at
}

func sameBody(a, b *testkit.Response) bool {
	return requestIDField.ReplaceAllString(a.Raw, "") == requestIDField.ReplaceAllString(b.Raw, "")
}

// TestFencedStampNeverLandsBehind: release A of dev loses its first gate
// write to another useId's take (the gate's clock passes its stamp T), and
// its behind write is slow in transit (1.2 s). Meanwhile a second release
// B of dev (A re-sent with the same key, or another caller without a key)
// finds A's stamp older than a second: it fences it (the gate's clock
// carried past T, "so that no write at its time lands any more") and moves
// the stamp on the take's record to now. A's behind write then arrives,
// before B's gate write. Promises: A is never stamped more than ~1 s before
// it commits; a keyed release answers the same body every time; the
// action.use_released event carries the release's time.
func TestFencedStampNeverLandsBehind(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"same-key", "unkeyed"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var env *testkit.Env
			var firstAt, behindAt, bFinal atomic.Int32
			var writes atomic.Int32
			bReady := make(chan struct{})
			bDone := make(chan struct{})
			var bOnce sync.Once
			var aLetGo atomic.Int64
			var bResp atomic.Pointer[testkit.Response]
			hdrB := []string{}
			if mode == "same-key" {
				hdrB = []string{"Idempotency-Key", "fb-rel"}
			}
			env, _ = hooked(t, func(n int32) {
				writes.Store(n)
				switch n {
				case firstAt.Load():
					// A's first gate write: another useId takes first, with a later time.
					if r, err := testkit.Send(client, "POST", env.URL+"/actions/fb/consume", `{"useId":"other"}`); err != nil || r.Status != 200 {
						t.Errorf("other's take: %v %v", r, err)
					}
					behindAt.Store(writes.Load() + 1)
				case behindAt.Load():
					// A's behind write, slow in transit.
					time.Sleep(1200 * time.Millisecond)
					k := int32(4) // B: stamp, fence, stamp moved, gate write
					if mode == "same-key" {
						k = 5 // and its record first
					}
					bFinal.Store(n + k)
					go func() {
						defer close(bDone)
						if r, err := testkit.Send(client, "POST", env.URL+"/actions/fb/uses/dev/release", ``, hdrB...); err == nil {
							bResp.Store(r)
						}
					}()
					select {
					case <-bReady:
					case <-time.After(15 * time.Second):
						t.Errorf("B never reached its gate write (writes %d)", writes.Load())
					}
					aLetGo.Store(time.Now().UnixMilli())
				case bFinal.Load():
					bOnce.Do(func() { close(bReady) })
					time.Sleep(600 * time.Millisecond) // A's behind write lands first
				}
			}, testkit.WithEvents)
			from := time.Now().Add(-time.Second).UTC()
			create(t, env, `{"actionId":"fb","userId":"u","maxUses":3,"releasable":true}`)
			take := do(t, env, "POST", "/actions/fb/consume", `{"useId":"dev"}`)
			if take.Status != 200 {
				t.Fatal(take.Raw)
			}
			firstAt.Store(writes.Load() + 3) // +1 A's record, +2 its stamp, +3 its first gate write
			a := do(t, env, "POST", "/actions/fb/uses/dev/release", ``, "Idempotency-Key", "fb-rel")
			// At once, while B is still between its writes: dev taken again.
			retake := do(t, env, "POST", "/actions/fb/consume", `{"useId":"dev"}`)
			<-bDone
			b := bResp.Load()
			t.Logf("dev taken again at once: %d %s", retake.Status, retake.Str("usedAt"))
			defer func() {
				// A re-take is stamped after every releasedAt answered for the use it follows.
				for _, r := range []*testkit.Response{a, b, do(t, env, "POST", "/actions/fb/uses/dev/release", ``, "Idempotency-Key", "fb-rel")} {
					if r != nil && r.Status == 200 && retake.Status == 200 && r.Str("usedAt") != retake.Str("usedAt") && !ts(t, r.Str("releasedAt")).Before(ts(t, retake.Str("usedAt"))) {
						t.Errorf("a release of the use before answered releasedAt %s, not before the re-take's usedAt %s", r.Str("releasedAt"), retake.Str("usedAt"))
					}
				}
			}()
			t.Logf("A: %d %s", a.Status, a.Raw)
			if b != nil {
				t.Logf("B: %d %s", b.Status, b.Raw)
			}
			if a.Status != 200 {
				t.Fatalf("A: %d %s", a.Status, a.Raw)
			}
			at := ts(t, a.Str("releasedAt"))
			if lag := time.UnixMilli(aLetGo.Load()).Sub(at); lag > 1100*time.Millisecond {
				t.Errorf("A answered releasedAt %s, but its write committed at or after %s: stamped %s before it committed (fenced by B)",
					a.Str("releasedAt"), time.UnixMilli(aLetGo.Load()).UTC().Format(time.RFC3339Nano), lag)
			}
			if mode == "same-key" && b != nil && !sameBody(a, b) {
				t.Errorf("the same key answered two bodies:\n A %s\n B %s", a.Raw, b.Raw)
			}
			again := do(t, env, "POST", "/actions/fb/uses/dev/release", ``, "Idempotency-Key", "fb-rel")
			if !sameBody(a, again) {
				t.Errorf("A re-sent with its key: %d %s; first answer %s", again.Status, again.Raw, a.Raw)
			}
			if h := do(t, env, "GET", "/actions/fb", "").Body["usesHeld"]; h != 2.0 {
				t.Errorf("usesHeld %v, want 2 (other, dev again)", h)
			}
			streamed := map[string]bool{}
			for _, l := range useEventLines(t, env, "fb", 4) {
				t.Log(l)
				streamed[l] = true
				if strings.HasPrefix(l, "action.use_released useId=dev") && !strings.Contains(l, "releasedAt="+a.Str("releasedAt")) {
					t.Errorf("the release event %q does not carry A's releasedAt %s", l, a.Str("releasedAt"))
				}
			}
			if p := do(t, env, "POST", "/_local/republish", fmt.Sprintf(`{"from":%q,"to":%q}`, from.Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))); p.Status != 200 {
				t.Fatalf("republish: %s", p.Raw)
			}
			env.Settled(t)
			for _, l := range useEventLines(t, env, "fb", 5) {
				if !streamed[l] {
					t.Errorf("republish made an event the stream never did: %s", l)
				}
			}
		})
	}
}

// TestStaleStampFencedOnAGateWhoseClockIsAhead: release A of dev fails
// (503) after its stamp, before its gate write; more than a second later a
// take of X loses its gate write to Y's and is slow (1 s), so it is stamped
// again ahead of now by what its write took: the gate's clock is ahead of
// wall time. Release B of dev then finishes A: A's stamp is stale, so B
// fences it at its clock, which is behind the gate's. The fence write
// fails; the release must still answer 200 (it used to move its stamp past
// the gate's clock), in a few writes. Trials: 3.
func TestStaleStampFencedOnAGateWhoseClockIsAhead(t *testing.T) {
	t.Parallel()
	var env *testkit.Env
	var proxy *faults.Proxy
	var writes, failAt, slowAt atomic.Int32
	var id atomic.Value
	env, proxy = hooked(t, func(n int32) {
		writes.Store(n)
		switch n {
		case failAt.Load():
			proxy.Down(true)
		case slowAt.Load():
			if r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id.Load().(string)+"/consume", `{"useId":"y"}`); err != nil || r.Status != 200 {
				t.Errorf("y: %v %v", r, err)
			}
			time.Sleep(1000 * time.Millisecond)
		}
	})
	bad := 0
	const trials = 3
	for trial := range trials {
		a := fmt.Sprintf("sa%d", trial)
		id.Store(a)
		create(t, env, `{"actionId":"`+a+`","userId":"u","maxUses":6,"releasable":true}`)
		if r := do(t, env, "POST", "/actions/"+a+"/consume", `{"useId":"dev"}`); r.Status != 200 {
			t.Fatal(r.Raw)
		}
		failAt.Store(writes.Load() + 2) // +1 A's stamp, +2 its gate write
		first := do(t, env, "POST", "/actions/"+a+"/uses/dev/release", ``)
		proxy.Down(false)
		failAt.Store(0)
		if first.Status != 503 {
			t.Fatalf("A: %d %s", first.Status, first.Raw)
		}
		time.Sleep(1100 * time.Millisecond)
		slowAt.Store(writes.Load() + 2) // +1 X's record, +2 its gate write
		x := do(t, env, "POST", "/actions/"+a+"/consume", `{"useId":"x"}`)
		slowAt.Store(0)
		ahead := time.Until(ts(t, x.Str("usedAt")))
		w0 := writes.Load()
		start := time.Now()
		b := do(t, env, "POST", "/actions/"+a+"/uses/dev/release", ``)
		took := time.Since(start)
		// 6 writes, and 2 more for each whole second B took: a stamp of
		// B's own fenced when a busy machine made it stale (a fence needs
		// its stamp a second old).
		limit := 6 + 2*int32(took/time.Second)
		t.Logf("trial %d: x taken at %s (%s ahead of now); B: %d %s after %d writes (limit %d), %s", trial, x.Str("usedAt"), ahead, b.Status, b.Raw, writes.Load()-w0, limit, took)
		if b.Status != 200 || writes.Load()-w0 > limit {
			bad++
		}
	}
	t.Logf("%d of %d trials: the release that finished a stale stamp answered other than 200 or took more writes than its limit", bad, trials)
	if bad > 0 {
		t.Fail()
	}
}

// busyHook is a write hook in which dev's release on action id loses its
// first gate write to another useId's take (its behind write follows):
// arm it before the release (keyed: the release has a record write first);
// onFirst runs after that take, onBehind in the hook of the behind write.
type busyHook struct {
	env      *testkit.Env
	id       string
	writes   atomic.Int32
	firstAt  atomic.Int32
	behindAt atomic.Int32
	onBehind func(n int32)
	onFirst  func()
}

func (h *busyHook) hook(n int32) {
	h.writes.Store(n)
	switch n {
	case h.firstAt.Load():
		if r, err := testkit.Send(client, "POST", h.env.URL+"/actions/"+h.id+"/consume", `{"useId":"other"}`); err != nil || r.Status != 200 {
			panic(fmt.Sprintf("other's take: %v %v", r, err))
		}
		h.behindAt.Store(h.writes.Load() + 1)
		if h.onFirst != nil {
			h.onFirst()
		}
	case h.behindAt.Load():
		if h.onBehind != nil {
			h.onBehind(n)
		}
	}
}

func (h *busyHook) arm(keyed bool) {
	k := int32(2) // +1 the stamp, +2 the first gate write
	if keyed {
		k = 3
	}
	h.behindAt.Store(0)
	h.firstAt.Store(h.writes.Load() + k)
}

func (h *busyHook) disarm() { h.firstAt.Store(0); h.behindAt.Store(0) }

// release sends dev's release (keyed: with the key <id>-rel) with the hook
// armed, and returns its answer.
func (h *busyHook) release(t *testing.T, keyed bool) *testkit.Response {
	t.Helper()
	var hdr []string
	if keyed {
		hdr = []string{"Idempotency-Key", h.id + "-rel"}
	}
	h.arm(keyed)
	defer h.disarm()
	return do(t, h.env, "POST", "/actions/"+h.id+"/uses/dev/release", ``, hdr...)
}

// TestBehindWriteAnswerLost: dev's release loses its first gate write to
// another take; its behind write applies and its answer is lost (the SDK
// sends it again). The release answers 200 with its own time (not 404), the
// use freed once; keyed, re-sent it answers the same body; the event
// carries the answered releasedAt; dev taken again is stamped after it.
func TestBehindWriteAnswerLost(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{false, true} {
		t.Run(map[bool]string{true: "keyed", false: "unkeyed"}[keyed], func(t *testing.T) {
			t.Parallel()
			var proxy *faults.Proxy
			h := &busyHook{id: "la"}
			h.onFirst = func() { proxy.PassThenDrop(1, 1) } // the first gate write passes, the behind write's answer is lost
			env, p := hooked(t, h.hook, testkit.WithEvents)
			h.env, proxy = env, p
			create(t, env, `{"actionId":"la","userId":"u","maxUses":4,"releasable":true}`)
			take := do(t, env, "POST", "/actions/la/consume", `{"useId":"dev"}`)
			rel := h.release(t, keyed)
			t.Logf("take %s; release %d %s; drops %+v", take.Raw, rel.Status, rel.Raw, proxy.Counts())
			if rel.Status != 200 {
				t.Fatalf("release: %d %s", rel.Status, rel.Raw)
			}
			if !ts(t, take.Str("usedAt")).Before(ts(t, rel.Str("releasedAt"))) {
				t.Errorf("usedAt %s not before releasedAt %s", take.Str("usedAt"), rel.Str("releasedAt"))
			}
			if keyed {
				if again := do(t, env, "POST", "/actions/la/uses/dev/release", ``, "Idempotency-Key", "la-rel"); !sameBody(rel, again) {
					t.Errorf("re-sent: %d %s; first %s", again.Status, again.Raw, rel.Raw)
				}
			}
			if h := do(t, env, "GET", "/actions/la", "").Body["usesHeld"]; h != 1.0 {
				t.Errorf("usesHeld %v, want 1", h)
			}
			again := do(t, env, "POST", "/actions/la/consume", `{"useId":"dev"}`)
			if again.Status != 200 || !ts(t, rel.Str("releasedAt")).Before(ts(t, again.Str("usedAt"))) {
				t.Errorf("take again: %d %s; released at %s", again.Status, again.Raw, rel.Str("releasedAt"))
			}
			n := 0
			for _, l := range useEventLines(t, env, "la", 4) {
				t.Log(l)
				if strings.HasPrefix(l, "action.use_released useId=dev") {
					n++
					if !strings.Contains(l, "releasedAt="+rel.Str("releasedAt")) {
						t.Errorf("release event %q, answer %s", l, rel.Str("releasedAt"))
					}
				}
			}
			if n != 1 {
				t.Errorf("%d release events of dev, want 1", n)
			}
		})
	}
}

// TestCancelBetweenTheReleaseWrites: dev's release loses its first gate
// write to another take; before its behind write, the action is canceled.
// The release answers 410 canceled, or 200 stamped before canceledAt; the
// keyed release re-sent answers the same body.
func TestCancelBetweenTheReleaseWrites(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{false, true} {
		t.Run(map[bool]string{true: "keyed", false: "unkeyed"}[keyed], func(t *testing.T) {
			t.Parallel()
			h := &busyHook{id: "cb"}
			var cancel atomic.Pointer[testkit.Response]
			h.onBehind = func(int32) {
				if r, err := testkit.Send(client, "POST", h.env.URL+"/actions/cb/cancel", `{"reason":"revoked"}`); err == nil {
					cancel.Store(r)
				}
			}
			env, _ := hooked(t, h.hook)
			h.env = env
			create(t, env, `{"actionId":"cb","userId":"u","maxUses":4,"releasable":true}`)
			do(t, env, "POST", "/actions/cb/consume", `{"useId":"dev"}`)
			rel := h.release(t, keyed)
			c := cancel.Load()
			if c == nil || c.Status != 200 {
				t.Fatalf("cancel: %v", c)
			}
			t.Logf("release %d %s; cancel %s", rel.Status, rel.Raw, c.Raw)
			switch {
			case rel.Status == 410 && rel.Str("error") == "canceled":
			case rel.Status == 200 && ts(t, rel.Str("releasedAt")).Before(ts(t, c.Str("canceledAt"))):
			default:
				t.Errorf("release %d %s; canceledAt %s", rel.Status, rel.Raw, c.Str("canceledAt"))
			}
			if keyed {
				if again := do(t, env, "POST", "/actions/cb/uses/dev/release", ``, "Idempotency-Key", "cb-rel"); !sameBody(again, rel) {
					t.Errorf("re-sent %d %s; first %s", again.Status, again.Raw, rel.Raw)
				}
			}
		})
	}
}
