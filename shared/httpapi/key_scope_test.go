package httpapi_test

import (
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestKeyScopeCancelAndCancelAll: a key names one call, one operation on
// one action or one cancel-all, so the same key sent to a cancel of one
// action and to a cancel-all of its user is two calls, both performed, in
// either order; each still replays under its key and body, and another
// body under its key is still 422. (Before, the second of the two was 422
// idempotency_key_reused, forever, and canceled nothing.)
func TestKeyScopeCancelAndCancelAll(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	replayed := func(r *testkit.Response) bool { return r.Header.Get("Idempotent-Replayed") == "true" }
	for _, id := range []string{"a1", "a2"} {
		create(t, env, `{"actionId":"`+id+`","userId":"ua"}`)
	}
	for _, id := range []string{"b1", "b2"} {
		create(t, env, `{"actionId":"`+id+`","userId":"ub"}`)
	}

	t.Run("a cancel, then a cancel-all of its user", func(t *testing.T) {
		one := do(t, env, "POST", "/actions/a1/cancel", `{"reason":"lost"}`, "Idempotency-Key", "scope-1")
		expect(t, env, one, 200, "", nil)
		all := do(t, env, "POST", "/users/ua/actions/cancel", `{"reason":"sign out"}`, "Idempotency-Key", "scope-1")
		expect(t, env, all, 200, "", nil)
		if all.Raw != `{"canceled":1,"actionIds":["a2"]}`+"\n" || replayed(all) {
			t.Fatalf("cancel-all after a cancel with its key: %s (replayed %v), want a2 canceled", all.Raw, replayed(all))
		}
		if again := do(t, env, "POST", "/users/ua/actions/cancel", `{"reason":"sign out"}`, "Idempotency-Key", "scope-1"); again.Raw != all.Raw || !replayed(again) {
			t.Errorf("cancel-all re-sent: %d %s (replayed %v), want its answer replayed", again.Status, again.Raw, replayed(again))
		}
		if again := do(t, env, "POST", "/actions/a1/cancel", `{"reason":"lost"}`, "Idempotency-Key", "scope-1"); again.Raw != one.Raw || !replayed(again) {
			t.Errorf("cancel re-sent: %d %s (replayed %v), want its answer replayed", again.Status, again.Raw, replayed(again))
		}
		expect(t, env, do(t, env, "POST", "/actions/a1/cancel", `{"reason":"other"}`, "Idempotency-Key", "scope-1"), 422, "idempotency_key_reused", nil)
		if g := do(t, env, "GET", "/actions/a1", ""); g.Str("cancelReason") != "lost" {
			t.Errorf("a1: %s, want the cancel's reason", g.Raw)
		}
	})
	t.Run("a cancel-all, then a cancel of one of its actions and of one opened since", func(t *testing.T) {
		all := do(t, env, "POST", "/users/ub/actions/cancel", `{"reason":"sign out"}`, "Idempotency-Key", "scope-2")
		if all.Raw != `{"canceled":2,"actionIds":["b1","b2"]}`+"\n" {
			t.Fatalf("cancel-all: %d %s", all.Status, all.Raw)
		}
		one := do(t, env, "POST", "/actions/b1/cancel", `{"reason":"lost"}`, "Idempotency-Key", "scope-2")
		expect(t, env, one, 200, "", nil)
		if replayed(one) || one.Str("cancelReason") != "sign out" {
			t.Errorf("cancel of an action the cancel-all canceled, with its key: %s (replayed %v), want 200, already canceled", one.Raw, replayed(one))
		}
		create(t, env, `{"actionId":"b3","userId":"ub"}`)
		if r := do(t, env, "POST", "/actions/b3/cancel", `{"reason":"lost"}`, "Idempotency-Key", "scope-2"); r.Status != 200 || r.Str("cancelReason") != "lost" {
			t.Errorf("cancel of a new action with the cancel-all's key: %d %s, want it canceled", r.Status, r.Raw)
		}
		if again := do(t, env, "POST", "/users/ub/actions/cancel", `{"reason":"sign out"}`, "Idempotency-Key", "scope-2"); again.Raw != all.Raw || !replayed(again) {
			t.Errorf("cancel-all re-sent: %d %s (replayed %v), want its answer replayed", again.Status, again.Raw, replayed(again))
		}
		expect(t, env, do(t, env, "POST", "/users/ub/actions/cancel", `{"reason":"other"}`, "Idempotency-Key", "scope-2"), 422, "idempotency_key_reused", nil)
	})
}
