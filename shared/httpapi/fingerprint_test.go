package httpapi_test

import (
	"strings"
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestFingerprintNumbersExact (item 8): numbers are compared exactly, not
// as doubles. Each pair below was one body after canonicalisation (RFC 8785
// goes through a double), so a keyed re-send with the other number replayed
// the 201 and the consume returned the first payload. Now it is 422; the
// same number spelled otherwise (1.0, 1e0, 10E-1) is still the same body.
func TestFingerprintNumbersExact(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for i, pair := range [][2]string{
		{"9007199254740993", "9007199254740992"},
		{"0", "-0"},
		{"1e400", "2e999"},
		{"0.1", "0.10000000000000001"},
	} {
		key := "n-" + string(rune('a'+i))
		first := create(t, env, `{"userId":"u","payload":{"id":`+pair[0]+`}}`, "Idempotency-Key", key)
		r := do(t, env, "POST", "/actions", `{"userId":"u","payload":{"id":`+pair[1]+`}}`, "Idempotency-Key", key)
		if r.Status != 422 || r.Str("error") != "idempotency_key_reused" {
			t.Errorf("%s then %s under one key: %d %s", pair[0], pair[1], r.Status, r.Raw)
		}
		c := do(t, env, "POST", "/actions/"+first.Str("actionId")+"/consume", ``)
		if !strings.Contains(c.Raw, `"payload":{"id":`+pair[0]+`}`) {
			t.Errorf("consume: %s", c.Raw)
		}
	}
	// One value, several spellings: still a retry of the same call.
	first := create(t, env, `{"userId":"u","payload":{"a":1,"b":[100,0.5]}}`, "Idempotency-Key", "same")
	for _, body := range []string{
		`{"payload":{"b":[1e2,0.50],"a":1.0},"userId":"u"}`,
		`{"userId":"u","payload":{"a":10E-1,"b":[100.000,5e-1]}}`,
	} {
		r := do(t, env, "POST", "/actions", body, "Idempotency-Key", "same")
		if r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" || r.Raw != first.Raw {
			t.Errorf("%s: %d %s", body, r.Status, r.Raw)
		}
	}
}

// TestIdempotencyKeyScope (item 9): an Idempotency-Key names one call, one
// operation on one action; it is stored on that action with the call's
// fingerprint (one write, no key item). So the same key and body replay and
// the same key with another body is 422 on that action and operation, while
// the same key on another action (another actionId, another path) or for
// another operation on the same action is another call. These held before;
// what changed is that docs/http-api.md and OpenAPI now say so (they promised 422 for
// any other body).
func TestIdempotencyKeyScope(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	replayed := func(r *testkit.Response) bool { return r.Header.Get("Idempotent-Replayed") == "true" }

	// create: the key is scoped to the actionId the body names…
	a := create(t, env, `{"actionId":"sa","userId":"u"}`, "Idempotency-Key", "k")
	if r := do(t, env, "POST", "/actions", `{"actionId":"sa","userId":"u"}`, "Idempotency-Key", "k"); r.Status != 201 || !replayed(r) || r.Raw != a.Raw {
		t.Fatalf("same key, same body: %d %s", r.Status, r.Raw)
	}
	env.Counter.Take()
	expect(t, env, do(t, env, "POST", "/actions", `{"actionId":"sa","userId":"v"}`, "Idempotency-Key", "k"), 422, "idempotency_key_reused", update)
	b := do(t, env, "POST", "/actions", `{"actionId":"sb","userId":"u"}`, "Idempotency-Key", "k")
	expect(t, env, b, 201, "", update)
	if replayed(b) || b.Str("actionId") != "sb" {
		t.Fatalf("the same key naming another action: %s", b.Raw)
	}
	// …or, without one, to the action derived from the key.
	d := create(t, env, `{"userId":"u"}`, "Idempotency-Key", "k")
	if d.Str("actionId") == "sa" || d.Str("actionId") == "sb" {
		t.Fatalf("derived id: %s", d.Raw)
	}
	expect(t, env, do(t, env, "POST", "/actions", `{"userId":"v"}`, "Idempotency-Key", "k"), 422, "idempotency_key_reused", update)

	// consume: the key is scoped to the action in the path.
	for _, id := range []string{"sa", "sb"} {
		r := do(t, env, "POST", "/actions/"+id+"/consume", `{"reason":"r"}`, "Idempotency-Key", "c")
		expect(t, env, r, 200, "", update)
		if replayed(r) || r.Str("actionId") != id {
			t.Fatalf("consume %s under a key used on another action: %s", id, r.Raw)
		}
	}
	if r := do(t, env, "POST", "/actions/sa/consume", `{"reason":"r"}`, "Idempotency-Key", "c"); r.Status != 200 || !replayed(r) {
		t.Fatalf("consume re-sent: %d %s", r.Status, r.Raw)
	}
	env.Counter.Take()
	expect(t, env, do(t, env, "POST", "/actions/sa/consume", `{"reason":"other"}`, "Idempotency-Key", "c"), 422, "idempotency_key_reused", update)

	// Another operation on the same action is another call: the create's key
	// cancels the derived action (200, not a replay of the create).
	r := do(t, env, "POST", "/actions/"+d.Str("actionId")+"/cancel", ``, "Idempotency-Key", "k")
	expect(t, env, r, 200, "", update)
	if replayed(r) || r.Str("canceledAt") == "" {
		t.Fatalf("cancel under the create's key: %s", r.Raw)
	}
}
