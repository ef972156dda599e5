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
