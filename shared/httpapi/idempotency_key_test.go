package httpapi_test

import (
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestIdempotencyKeyStructuredField: the IETF draft's quoted form and the
// bare form are the same key.
func TestIdempotencyKeyStructuredField(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	first := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", `"8e03978e-40d5"`)
	bare := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", `8e03978e-40d5`)
	if first.Status != 201 || bare.Status != 201 || bare.Str("actionId") != first.Str("actionId") || bare.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("quoted then bare: %s / %s", first.Raw, bare.Raw)
	}
	esc := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", `"a\"b\\c"`)
	same := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", `a"b\c`)
	if esc.Status != 201 || same.Str("actionId") != esc.Str("actionId") {
		t.Fatalf("escapes: %s / %s", esc.Raw, same.Raw)
	}
	env.Counter.Take()
	for _, bad := range []string{`"open`, `""`, `"a"b"`, `"a\x"`} {
		r := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", bad)
		expect(t, env, r, 400, "invalid_request", none)
		if r.Str("field") != "Idempotency-Key" {
			t.Fatal(r.Raw)
		}
	}
}
