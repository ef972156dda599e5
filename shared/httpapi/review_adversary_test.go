package httpapi_test

import (
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestReviewKeyedReleaseRetryFreesALaterTake: a keyed release whose answer
// was lost is re-sent (same Idempotency-Key, same body) after the useId took
// its use again. The re-send must replay the first release; instead the
// release's condition never looks at the key (a take's does, useKey:), so
// the re-send frees the new use: one keyed call, two releases.
func TestReviewKeyedReleaseRetryFreesALaterTake(t *testing.T) {
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"rk","userId":"u","maxUses":2,"releasable":true}`)
	if r := do(t, env, "POST", "/actions/rk/consume", `{"useId":"dev"}`); r.Status != 200 {
		t.Fatalf("take: %d %s", r.Status, r.Raw)
	}
	first := do(t, env, "POST", "/actions/rk/uses/dev/release", ``, "Idempotency-Key", "deactivate-1")
	if first.Status != 200 {
		t.Fatalf("release: %d %s", first.Status, first.Raw)
	}
	if r := do(t, env, "POST", "/actions/rk/consume", `{"useId":"dev"}`); r.Status != 200 || r.Body["usesHeld"] != 1.0 {
		t.Fatalf("take again: %d %s", r.Status, r.Raw)
	}
	resent := do(t, env, "POST", "/actions/rk/uses/dev/release", ``, "Idempotency-Key", "deactivate-1")
	g := do(t, env, "GET", "/actions/rk", "")
	if resent.Header.Get("Idempotent-Replayed") != "true" || g.Body["usesHeld"] != 1.0 {
		t.Fatalf("re-sent keyed release freed the later take: replayed=%q usesHeld=%v; first %s; re-send %s",
			resent.Header.Get("Idempotent-Replayed"), g.Body["usesHeld"], first.Raw, resent.Raw)
	}
}
