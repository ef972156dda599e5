package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
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

// TestIdempotencyKeySentTwiceIsRefused: a client (or a proxy on its way)
// that repeats the Idempotency-Key header reaches the handlers with one
// value, the two joined by a comma, as API Gateway joins a repeated header.
// That is no key of its own: the old code took "k-1,k-1" as a new key, so
// a retry of a keyed create whose header was repeated created a second
// action. It is 400 naming the header, and writes nothing.
func TestIdempotencyKeySentTwiceIsRefused(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	first := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", "k-1")
	if first.Status != 201 {
		t.Fatalf("create: %d %s", first.Status, first.Raw)
	}
	env.Counter.Take()
	for _, sent := range [][]string{{"k-1", "k-1"}, {"k-1", " k-1"}, {"k-1", "k-1", "k-1"},
		{"a,b", "a,b"}, {"k-1", `"k-1"`}, {`"k-1"`, "k-1"}, {`"k-1"`, `"k-1"`}, {"k-1", ""}, {"", "k-1"}, {`"a,b"`, "a,b"}} {
		req, err := http.NewRequest("POST", env.URL+"/actions", strings.NewReader(`{"userId":"u"}`))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range sent {
			req.Header.Add("Idempotency-Key", k)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r := &testkit.Response{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
		_ = json.Unmarshal(raw, &r.Body)
		expect(t, env, r, 400, "invalid_request", none)
		if r.Str("field") != "Idempotency-Key" || !strings.Contains(r.Str("message"), "more than once") {
			t.Fatalf("the header sent %d times: %s", len(sent), r.Raw)
		}
	}
	// A key with commas whose pieces name other keys is a key of its own,
	// sent once (a quoted one included).
	for _, k := range []string{"k-1,k-2", "a,b", ",", "a,b,a", "x,x,y", `"k-1,k-1"`} {
		if r := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", k); r.Status != 201 {
			t.Fatalf("key %q: %d %s", k, r.Status, r.Raw)
		}
	}
}
