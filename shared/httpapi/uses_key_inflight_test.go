package httpapi_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
)

// pause holds the UpdateItem numbered at (counted by a hooked Env) until
// resume is called; reached is closed when it arrives.
type pause struct {
	at      atomic.Int32
	reached chan struct{}
	resume  func()
	hookFn  func(n int32)
}

func newPause() *pause {
	release := make(chan struct{})
	p := &pause{reached: make(chan struct{})}
	p.resume = sync.OnceFunc(func() { close(release) })
	p.hookFn = func(n int32) {
		if n == p.at.Load() {
			close(p.reached)
			<-release
		}
	}
	return p
}

// TestKeyedTakeResentWhileItsFirstAttemptRuns: a keyed take's first
// attempt is slow between its record and its gate write (slow on the way to
// DynamoDB, or waiting out the SDK's backoff after a 500); the client sends
// it again meanwhile. The re-send answers 409 in_progress with Retry-After,
// takes nothing, and a release of the useId then finds nothing to free; the
// first attempt takes the use; re-sent afterwards, the key replays it, and
// the use releases. (The re-send used to take the use itself: released, the
// first attempt's late write took a second one for the same key, under a
// later time, and every release of it answered 503.)
func TestKeyedTakeResentWhileItsFirstAttemptRuns(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		failed bool // the first gate write is answered 500 (not applied); the SDK's re-send is the one held
	}{{"slow gate write", false}, {"gate write retried by the SDK", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var writes atomic.Int32
			p := newPause()
			env, proxy := hooked(t, func(n int32) { writes.Store(n); p.hookFn(n) })
			defer p.resume()
			create(t, env, `{"actionId":"kt","userId":"u","maxUses":2,"releasable":true}`)
			if r := do(t, env, "POST", "/actions/kt/consume", `{"useId":"warm"}`); r.Status != 200 { // the action read once
				t.Fatal(r.Raw)
			}
			take := func() *testkit.Response {
				return do(t, env, "POST", "/actions/kt/consume", `{"useId":"dev"}`, "Idempotency-Key", "kt-take")
			}
			p.at.Store(writes.Load() + 2) // +1 the record, +2 the gate write
			if c.failed {
				p.at.Add(1)
				proxy.PassThenFail(1, 1)
			}
			var first *testkit.Response
			var wg sync.WaitGroup
			wg.Go(func() { first = take() })
			<-p.reached
			again := take()
			if again.Status != 409 || again.Str("error") != "in_progress" || again.Header.Get("Retry-After") == "" {
				t.Errorf("re-sent while the first attempt runs: %d %s (Retry-After %q); want 409 in_progress", again.Status, again.Raw, again.Header.Get("Retry-After"))
			}
			if r := do(t, env, "POST", "/actions/kt/uses/dev/release", ``); r.Status != 404 {
				t.Errorf("release while the take runs: %d %s; want 404 (nothing held yet)", r.Status, r.Raw)
			}
			p.resume()
			wg.Wait()
			held := func() any { return do(t, env, "GET", "/actions/kt", "").Body["usesHeld"] }
			if first.Status != 200 || held() != 2.0 {
				t.Fatalf("first attempt: %d %s; %v held (want 2)", first.Status, first.Raw, held())
			}
			if r := take(); r.Raw != first.Raw || r.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("re-sent after: %d %s; want the first answer replayed", r.Status, r.Raw)
			}
			if r := do(t, env, "POST", "/actions/kt/uses/dev/release", ``); r.Status != 200 || r.Str("usedAt") != first.Str("usedAt") || held() != 1.0 {
				t.Errorf("release: %d %s, %v held", r.Status, r.Raw, held())
			}
			if r := take(); r.Raw != first.Raw {
				t.Errorf("re-sent after the release: %d %s; want the first answer", r.Status, r.Raw)
			}
			if h := held(); h != 1.0 {
				t.Errorf("%v held at the end; want 1 (warm's)", h)
			}
		})
	}
}

// TestKeyedTakeAnswerIsItsFirst: a keyed take is answered (refused
// no_uses_left, or answered as the use its useId already holds) and is slow
// to record that answer; meanwhile the use it met is released and the
// client re-sends the take. The re-send answers 409 in_progress and takes
// nothing; once recorded, the first answer is the key's, re-sent after.
// (The re-send used to take a use and answer 200, and the first attempt's
// answer, recorded after, was replayed to the next re-send: one key, two
// answers.)
func TestKeyedTakeAnswerIsItsFirst(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, other string }{
		{"refused no_uses_left", "a"},   // a 1-use action held by useId a
		{"found its useId held", "dev"}, // dev held by an unkeyed take
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var writes atomic.Int32
			p := newPause()
			env, _ := hooked(t, func(n int32) { writes.Store(n); p.hookFn(n) })
			defer p.resume()
			create(t, env, `{"actionId":"fa","userId":"u","maxUses":1,"releasable":true}`)
			if r := do(t, env, "POST", "/actions/fa/consume", `{"useId":"`+c.other+`"}`); r.Status != 200 {
				t.Fatal(r.Raw)
			}
			take := func() *testkit.Response {
				return do(t, env, "POST", "/actions/fa/consume", `{"useId":"dev"}`, "Idempotency-Key", "fa-take")
			}
			p.at.Store(writes.Load() + 3) // +1 the record, +2 the gate write (refused), +3 recording the answer
			var first *testkit.Response
			var wg sync.WaitGroup
			wg.Go(func() { first = take() })
			<-p.reached
			if r := do(t, env, "POST", "/actions/fa/uses/"+c.other+"/release", ``); r.Status != 200 {
				t.Fatal(r.Raw)
			}
			again := take()
			p.resume()
			wg.Wait()
			if again.Status != 409 || again.Str("error") != "in_progress" {
				t.Errorf("re-sent before the first answer was recorded: %d %s; want 409 in_progress", again.Status, again.Raw)
			}
			last := take()
			if requestIDField.ReplaceAllString(last.Raw, "") != requestIDField.ReplaceAllString(first.Raw, "") || last.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("first answer %d %s; re-sent after: %d %s", first.Status, first.Raw, last.Status, last.Raw)
			}
			if l := do(t, env, "GET", "/actions/fa/uses", ""); strings.Contains(l.Raw, `"dev"`) {
				t.Errorf("the key answered %d, yet dev holds a use: %s", first.Status, l.Raw)
			}
		})
	}
}

// TestFailedKeyedTakeLetsGo: a keyed take fails on a dependency fault
// after its record (recording its refusal fails, 500 to the write and to
// the SDK's re-sends): it answers 503 and gives up its charge, so its
// re-send, with no fault left, acts at once instead of answering
// in_progress for 30 s.
func TestFailedKeyedTakeLetsGo(t *testing.T) {
	t.Parallel()
	env, proxy := proxied(t)
	create(t, env, `{"actionId":"lg","userId":"u","maxUses":1,"releasable":true}`)
	if r := do(t, env, "POST", "/actions/lg/consume", `{"useId":"a"}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	take := func() *testkit.Response {
		return do(t, env, "POST", "/actions/lg/consume", `{"useId":"dev"}`, "Idempotency-Key", "lg-take")
	}
	proxy.PassThenFail(2, 3) // the record, the gate's refusal; recording it fails
	if r := take(); r.Status != 503 {
		t.Fatalf("under the fault: %d %s", r.Status, r.Raw)
	}
	proxy.PassThenFail(0, 0)
	if r := take(); r.Status != 409 || r.Str("error") != "no_uses_left" {
		t.Errorf("re-sent with no fault left: %d %s; want 409 no_uses_left", r.Status, r.Raw)
	}
}
