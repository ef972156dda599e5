package httpapi_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
)

// TestKeyedReleaseResentAfterRetake: two keyed releases of one use race;
// one frees it, the other finds it free. After the useId takes a use
// again, each release re-sent with its key replays its first answer
// (Idempotent-Replayed) and frees nothing: the new use stays held. A keyed
// release that found the use already released used to record nothing, and
// its re-send freed the new use (20 of 20 trials).
func TestKeyedReleaseResentAfterRetake(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	const trials = 20
	freed := 0
	for trial := range trials {
		id := fmt.Sprintf("rr%d", trial)
		create(t, env, `{"actionId":"`+id+`","userId":"u","maxUses":1,"releasable":true}`)
		if r := do(t, env, "POST", "/actions/"+id+"/consume", `{"useId":"dev"}`, "Idempotency-Key", id+"-take-1"); r.Status != 200 {
			t.Fatalf("take: %s", r.Raw)
		}
		first := make([]*testkit.Response, 2)
		var wg sync.WaitGroup
		for k := range first {
			wg.Go(func() {
				first[k], _ = testkit.Send(client, "POST", env.URL+"/actions/"+id+"/uses/dev/release", ``, "Idempotency-Key", fmt.Sprintf("%s-rel-%d", id, k))
			})
		}
		wg.Wait()
		if r := do(t, env, "POST", "/actions/"+id+"/consume", `{"useId":"dev"}`, "Idempotency-Key", id+"-take-2"); r.Status != 200 {
			t.Fatalf("take again: %s", r.Raw)
		}
		for k := range first {
			again := do(t, env, "POST", "/actions/"+id+"/uses/dev/release", ``, "Idempotency-Key", fmt.Sprintf("%s-rel-%d", id, k))
			if first[k] == nil || again.Status != first[k].Status || requestIDField.ReplaceAllString(again.Raw, "") != requestIDField.ReplaceAllString(first[k].Raw, "") ||
				again.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("trial %d: release %d re-sent: %d %s %v; first %v", trial, k, again.Status, again.Raw, again.Header, first[k])
			}
		}
		if g := do(t, env, "GET", "/actions/"+id, ""); g.Body["usesHeld"] != 1.0 {
			freed++
		}
	}
	t.Logf("%d of %d trials: a re-sent keyed release freed the use taken after it", freed, trials)
	if freed > 0 {
		t.Fail()
	}
}

// TestKeyedTakeKeepsItsFirstAnswer: a key's first answer is its answer for
// good. A keyed take answered as the replay of the use its useId held,
// re-sent after that use's release, replays that answer and takes no seat;
// a keyed take re-sent after its use's release and a re-take replays its
// own take (Idempotent-Replayed, byte for byte), and still does after one
// more release. (A keyed take used to record nothing when it found the use
// held, and its key was only remembered while its use was the latest.)
func TestKeyedTakeKeepsItsFirstAnswer(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"kf","userId":"u","maxUses":2,"releasable":true}`)
	take := func(key string) *testkit.Response {
		return do(t, env, "POST", "/actions/kf/consume", `{"useId":"dev"}`, "Idempotency-Key", key)
	}
	release := func() {
		if r := do(t, env, "POST", "/actions/kf/uses/dev/release", ``); r.Status != 200 {
			t.Fatalf("release: %s", r.Raw)
		}
	}
	held := func() float64 { return do(t, env, "GET", "/actions/kf", "").Body["usesHeld"].(float64) }
	a := take("A")
	b := take("B") // the useId holds A's use: B is answered as that take
	if a.Status != 200 || b.Status != 200 || b.Str("usedAt") != a.Str("usedAt") {
		t.Fatalf("take A %s, take B %s", a.Raw, b.Raw)
	}
	release()
	if again := take("B"); again.Raw != b.Raw || again.Header.Get("Idempotent-Replayed") != "true" || held() != 0 {
		t.Fatalf("B re-sent after the release: %s %v, %v held; first %s", again.Raw, again.Header, held(), b.Raw)
	}
	c := take("C")
	release()
	d := take("D")
	if c.Status != 200 || d.Status != 200 || d.Str("usedAt") == c.Str("usedAt") {
		t.Fatalf("take C %s, take D %s", c.Raw, d.Raw)
	}
	if again := take("C"); again.Raw != c.Raw || again.Header.Get("Idempotent-Replayed") != "true" || held() != 1 {
		t.Fatalf("C re-sent after its release and D's take: %s %v, %v held; first %s", again.Raw, again.Header, held(), c.Raw)
	}
	release()
	if again := take("C"); again.Status != 200 || again.Raw != c.Raw || again.Header.Get("Idempotent-Replayed") != "true" || held() != 0 {
		t.Fatalf("C re-sent after one more release: %d %s %v, %v held", again.Status, again.Raw, again.Header, held())
	}
	if r := do(t, env, "POST", "/actions/kf/consume", `{"useId":"other"}`, "Idempotency-Key", "C"); r.Status != 422 {
		t.Fatalf("C with another body: %d %s", r.Status, r.Raw)
	}
}

// TestKeyedTakeResentAfterAFailedRelease: a release fails half way (DynamoDB
// is down from one of its writes on: the call answers 503), then the take
// of that use is re-sent with its key. The re-send replays its first answer
// (same usedAt, Idempotent-Replayed) and takes no second use, whichever
// write failed; the release sent again then frees the use, and the take
// re-sent once more still replays. With the gate written before the take's
// record was stamped, a release stopped between the two left a take that
// looked as if it had never landed: its re-send took a second use (a new
// usedAt, no replay), for every unkeyed case below.
func TestKeyedTakeResentAfterAFailedRelease(t *testing.T) {
	t.Parallel()
	var writes, failAt atomic.Int32
	var proxy *faults.Proxy
	env, proxy := hooked(t, func(n int32) {
		writes.Store(n)
		if n == failAt.Load() {
			proxy.Down(true)
		}
	})
	cases := []struct {
		name string
		key  string // the release's Idempotency-Key ("": none)
		fail int32  // which of the release's writes fails
	}{
		{"unkeyed, first write", "", 1},
		{"unkeyed, second write", "", 2},
		{"keyed, first write", "rel", 1},
		{"keyed, second write", "rel", 2},
		{"keyed, third write", "rel", 3},
	}
	for i, c := range cases {
		id := fmt.Sprintf("tr%d", i)
		create(t, env, `{"actionId":"`+id+`","userId":"u","maxUses":2,"releasable":true}`)
		take := func() *testkit.Response {
			return do(t, env, "POST", "/actions/"+id+"/consume", `{"useId":"dev"}`, "Idempotency-Key", id+"-take")
		}
		release := func() *testkit.Response {
			if c.key == "" {
				return do(t, env, "POST", "/actions/"+id+"/uses/dev/release", ``)
			}
			return do(t, env, "POST", "/actions/"+id+"/uses/dev/release", ``, "Idempotency-Key", id+"-"+c.key)
		}
		held := func() float64 { return do(t, env, "GET", "/actions/"+id, "").Body["usesHeld"].(float64) }
		first := take()
		if first.Status != 200 {
			t.Fatalf("%s: take: %s", c.name, first.Raw)
		}
		failAt.Store(writes.Load() + c.fail)
		failed := release()
		proxy.Down(false)
		failAt.Store(0)
		if failed.Status != 503 {
			t.Fatalf("%s: the release with DynamoDB down from its write %d answered %d %s", c.name, c.fail, failed.Status, failed.Raw)
		}
		before := held()
		replays := func(when string) {
			again := take()
			if again.Raw != first.Raw || again.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("%s: the take re-sent %s: %d %s (replayed %q); first %s", c.name, when, again.Status, again.Raw, again.Header.Get("Idempotent-Replayed"), first.Raw)
			}
		}
		replays("after the failed release")
		if h := held(); h != before {
			t.Errorf("%s: %v uses held after the take was re-sent, %v before", c.name, h, before)
		}
		r := release()
		if r.Status != 200 && !(c.key == "" && r.Status == 404) || held() != 0 {
			t.Errorf("%s: the release sent again: %d %s, %v held", c.name, r.Status, r.Raw, held())
		}
		replays("after the release")
		if h := held(); h != 0 {
			t.Errorf("%s: %v uses held after the take was re-sent after the release", c.name, h)
		}
	}
}

// TestKeyedTakeResentDuringARelease: the take of a use is re-sent with its
// key while the use is being released, many times over. Every re-send
// replays the take's first answer and none takes a second use: with the
// gate written before the take's record was stamped, a re-send that came
// between the two writes took one.
func TestKeyedTakeResentDuringARelease(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	trials := testkit.Scale(100)
	retaken := 0
	for trial := range trials {
		id := fmt.Sprintf("rd%d", trial)
		create(t, env, `{"actionId":"`+id+`","userId":"u","maxUses":2,"releasable":true}`)
		take := func() (*testkit.Response, error) {
			return testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", `{"useId":"dev"}`, "Idempotency-Key", id+"-take")
		}
		first, err := take()
		if err != nil || first.Status != 200 {
			t.Fatalf("take: %v %v", first, err)
		}
		var again [3]*testkit.Response
		var rel *testkit.Response
		var wg sync.WaitGroup
		wg.Go(func() { rel, _ = testkit.Send(client, "POST", env.URL+"/actions/"+id+"/uses/dev/release", ``) })
		for k := range again {
			wg.Go(func() { again[k], _ = take() })
		}
		wg.Wait()
		bad := rel == nil || rel.Status != 200
		for _, r := range again {
			bad = bad || r == nil || r.Raw != first.Raw || r.Header.Get("Idempotent-Replayed") != "true"
		}
		if h := do(t, env, "GET", "/actions/"+id, "").Body["usesHeld"]; h != 0.0 || bad {
			retaken++
			t.Logf("trial %d: release %v, re-sends %v, %v held", trial, rel, again, h)
		}
	}
	t.Logf("%d of %d trials: a take re-sent during its use's release did not replay, or took a use again", retaken, trials)
	if retaken > 0 {
		t.Fail()
	}
}

// TestKeyedUseRefusalsReplay: a keyed take or release refused by what the
// action is (not active yet, canceled, not releasable) keeps that refusal
// as its key's answer: re-sent, it answers the same with
// Idempotent-Replayed, and a take refused before activeAt takes nothing
// when re-sent after it. (These refusals were worked out again on every
// re-send, without the header, and the not_active take re-sent after
// activeAt took a use.)
func TestKeyedUseRefusalsReplay(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	create(t, env, `{"actionId":"kr-pending","userId":"u","maxUses":2,"activeAt":"`+future+`"}`)
	create(t, env, `{"actionId":"kr-canceled","userId":"u","maxUses":2,"releasable":true}`)
	create(t, env, `{"actionId":"kr-single","userId":"u"}`)
	if r := do(t, env, "POST", "/actions/kr-canceled/consume", `{"useId":"dev"}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	if r := do(t, env, "POST", "/actions/kr-canceled/cancel", `{}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	cases := []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"take before activeAt", "/actions/kr-pending/consume", `{"useId":"a"}`, 409, "not_active"},
		{"take of a canceled action", "/actions/kr-canceled/consume", `{"useId":"b"}`, 410, "canceled"},
		{"release on a canceled action", "/actions/kr-canceled/uses/dev/release", ``, 410, "canceled"},
		{"release on a single-use action", "/actions/kr-single/uses/x/release", ``, 409, "not_releasable"},
	}
	first := make([]*testkit.Response, len(cases))
	for i, c := range cases {
		first[i] = do(t, env, "POST", c.path, c.body, "Idempotency-Key", fmt.Sprint("kr-", i))
		if first[i].Status != c.status || first[i].Str("error") != c.code {
			t.Fatalf("%s: %d %s, want %d %s", c.name, first[i].Status, first[i].Raw, c.status, c.code)
		}
	}
	env.Shift(2 * time.Hour) // past kr-pending's activeAt
	defer env.Shift(0)
	for i, c := range cases {
		again := do(t, env, "POST", c.path, c.body, "Idempotency-Key", fmt.Sprint("kr-", i))
		if again.Status != c.status || again.Str("error") != c.code || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s re-sent: %d %s (replayed %q); first %s", c.name, again.Status, again.Raw, again.Header.Get("Idempotent-Replayed"), first[i].Raw)
		}
	}
	if g := do(t, env, "GET", "/actions/kr-pending", ""); g.Body["usesHeld"] != 0.0 {
		t.Errorf("the not_active take re-sent after activeAt took a use: %s", g.Raw)
	}
}
