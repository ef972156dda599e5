package httpapi_test

// Cancel-all (POST /users/{userId}/actions/cancel) under an Idempotency-Key:
// a re-send replays, another body is 422, the answer lists what this call
// canceled.

import (
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestCancelAllKeyReusedWithOtherBodyIs422: "Same key + other body is 422"
// holds for every POST (docs/http-api.md, Idempotency-Key). A cancel-all
// re-sent with its key but another kind is not a retry: it is refused 422
// and cancels nothing. Before the fix it canceled the other kind's actions
// and answered 200.
func TestCancelAllKeyReusedWithOtherBodyIs422(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"l1","userId":"u","kind":"login"}`)
	create(t, env, `{"actionId":"c1","userId":"u","kind":"coupon"}`)
	first := do(t, env, "POST", "/users/u/actions/cancel", `{"kind":"login"}`, "Idempotency-Key", "signout-1")
	if first.Status != 200 || first.Body["canceled"] != 1.0 {
		t.Fatalf("first cancel-all: %s", first.Raw)
	}
	r := do(t, env, "POST", "/users/u/actions/cancel", `{"kind":"coupon"}`, "Idempotency-Key", "signout-1")
	g := do(t, env, "GET", "/actions/c1", "")
	if r.Status != 422 || r.Str("error") != "idempotency_key_reused" || g.Str("canceledAt") != "" {
		t.Fatalf("same key, other body: %d %s; c1 afterwards: %s", r.Status, r.Raw, g.Raw)
	}
}

// TestCancelAllListsOnlyWhatItCanceled: the cancel-all answer is "what this
// call canceled". An action canceled by a single-action cancel that carried
// the same key and body ({"reason":"r"} here) is not listed by the
// cancel-all, which canceled nothing. Before the fix it was.
func TestCancelAllListsOnlyWhatItCanceled(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"x1","userId":"u"}`)
	if r := do(t, env, "POST", "/actions/x1/cancel", `{"reason":"r"}`, "Idempotency-Key", "k-7"); r.Status != 200 {
		t.Fatalf("single cancel: %s", r.Raw)
	}
	r := do(t, env, "POST", "/users/u/actions/cancel", `{"reason":"r"}`, "Idempotency-Key", "k-7")
	if r.Status == 200 && r.Body["canceled"] != 0.0 {
		t.Fatalf("cancel-all canceled nothing but answers %s", r.Raw)
	}
}

// TestCancelAllKeyedResend (issue 21, item 11): a keyed cancel-all re-sent
// with its key and body says it is a replay (Idempotent-Replayed: true),
// whether the first call canceled something or nothing; the same key with
// another body is 422 even when the first call canceled nothing, and then
// cancels nothing. Each keyed call costs one conditional write more than an
// unkeyed one (the call's record), and nothing else.
func TestCancelAllKeyedResend(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"cr-l1","userId":"cr","kind":"login"}`)
	first := do(t, env, "POST", "/users/cr/actions/cancel", `{"kind":"login"}`, "Idempotency-Key", "cr-1")
	if first.Status != 200 || first.Body["canceled"] != 1.0 || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first cancel-all: %d %v %s", first.Status, first.Header, first.Raw)
	}
	again := do(t, env, "POST", "/users/cr/actions/cancel", `{"kind":"login"}`, "Idempotency-Key", "cr-1")
	if again.Status != 200 || again.Raw != first.Raw || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("re-sent cancel-all: %d %v %s, first %s", again.Status, again.Header, again.Raw, first.Raw)
	}

	// A first call that canceled nothing.
	none := do(t, env, "POST", "/users/cr/actions/cancel", `{"kind":"coupon"}`, "Idempotency-Key", "cr-2")
	if none.Status != 200 || none.Body["canceled"] != 0.0 || none.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("cancel-all of nothing: %d %v %s", none.Status, none.Header, none.Raw)
	}
	env.Counter.Take()
	noneAgain := do(t, env, "POST", "/users/cr/actions/cancel", `{"kind":"coupon"}`, "Idempotency-Key", "cr-2")
	if noneAgain.Status != 200 || noneAgain.Body["canceled"] != 0.0 || noneAgain.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("re-sent cancel-all of nothing: %d %v %s", noneAgain.Status, noneAgain.Header, noneAgain.Raw)
	}
	t.Logf("keyed cancel-all re-sent (nothing to cancel): %v", env.Counter.Take())
	create(t, env, `{"actionId":"cr-t1","userId":"cr","kind":"transfer"}`)
	reused := do(t, env, "POST", "/users/cr/actions/cancel", `{"kind":"transfer"}`, "Idempotency-Key", "cr-2")
	g := do(t, env, "GET", "/actions/cr-t1", "")
	if reused.Status != 422 || reused.Str("error") != "idempotency_key_reused" || g.Str("canceledAt") != "" {
		t.Fatalf("same key, other body, after a call that canceled nothing: %d %s; cr-t1 afterwards: %s", reused.Status, reused.Raw, g.Raw)
	}
	if other := do(t, env, "POST", "/users/cr-other/actions/cancel", `{"kind":"coupon"}`, "Idempotency-Key", "cr-2"); other.Status != 422 {
		t.Fatalf("same key, another user: %d %s", other.Status, other.Raw)
	}
}
