package httpapi_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
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
