package httpapi_test

import (
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestKeyedReleaseKeyFencesReplayAndReuse: a keyed release's re-send after
// the useId took a use again replays the first release (same releasedAt);
// the same key on another useId is 422 idempotency_key_reused.
func TestKeyedReleaseKeyFencesReplayAndReuse(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"rf","userId":"u","maxUses":3,"releasable":true}`)
	do(t, env, "POST", "/actions/rf/consume", `{"useId":"a"}`)
	do(t, env, "POST", "/actions/rf/consume", `{"useId":"b"}`)
	first := do(t, env, "POST", "/actions/rf/uses/a/release", ``, "Idempotency-Key", "k1")
	if first.Status != 200 || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("release: %d %s", first.Status, first.Raw)
	}
	if r := do(t, env, "POST", "/actions/rf/consume", `{"useId":"a"}`); r.Status != 200 {
		t.Fatalf("take again: %d %s", r.Status, r.Raw)
	}
	again := do(t, env, "POST", "/actions/rf/uses/a/release", ``, "Idempotency-Key", "k1")
	if again.Status != 200 || again.Header.Get("Idempotent-Replayed") != "true" ||
		again.Body["releasedAt"] != first.Body["releasedAt"] || again.Body["usedAt"] != first.Body["usedAt"] {
		t.Fatalf("re-send: %d %s; first %s", again.Status, again.Raw, first.Raw)
	}
	other := do(t, env, "POST", "/actions/rf/uses/b/release", ``, "Idempotency-Key", "k1")
	if other.Status != 422 || other.Body["error"] != "idempotency_key_reused" {
		t.Fatalf("key on another use: %d %s", other.Status, other.Raw)
	}
	if g := do(t, env, "GET", "/actions/rf", ""); g.Body["usesHeld"] != 2.0 {
		t.Fatalf("usesHeld: %s", g.Raw)
	}
	// Unkeyed releases are unchanged: the later use is freed.
	if r := do(t, env, "POST", "/actions/rf/uses/a/release", ``); r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("unkeyed release: %d %s", r.Status, r.Raw)
	}
}

// TestKeyedReleaseRetryNeverFreesALaterTake: a keyed release whose answer
// was lost is re-sent (same Idempotency-Key, same body) after the useId took
// its use again. The re-send replays the first release and frees nothing:
// one keyed call, one release. Before the fix the release's condition never
// looked at the key (a take's does, useKey:), so the re-send freed the new
// use.
func TestKeyedReleaseRetryNeverFreesALaterTake(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"rk","userId":"u","maxUses":2,"releasable":true}`)
	if r := do(t, env, "POST", "/actions/rk/consume", `{"useId":"dev"}`); r.Status != 200 {
		t.Fatalf("take: %d %s", r.Status, r.Raw)
	}
	first := do(t, env, "POST", "/actions/rk/uses/dev/release", ``, "Idempotency-Key", "deactivate-1")
	if first.Status != 200 {
		t.Fatalf("release: %d %s", first.Status, first.Raw)
	}
	if r := do(t, env, "POST", "/actions/rk/consume", `{"useId":"dev"}`); r.Status != 200 || do(t, env, "GET", "/actions/rk", "").Body["usesHeld"] != 1.0 {
		t.Fatalf("take again: %d %s", r.Status, r.Raw)
	}
	resent := do(t, env, "POST", "/actions/rk/uses/dev/release", ``, "Idempotency-Key", "deactivate-1")
	g := do(t, env, "GET", "/actions/rk", "")
	if resent.Header.Get("Idempotent-Replayed") != "true" || g.Body["usesHeld"] != 1.0 {
		t.Fatalf("re-sent keyed release freed the later take: replayed=%q usesHeld=%v; first %s; re-send %s",
			resent.Header.Get("Idempotent-Replayed"), g.Body["usesHeld"], first.Raw, resent.Raw)
	}
}
