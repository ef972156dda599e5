package httpapi_test

// Input edges (issue 21, items 12, 13, 15), each through the real handlers
// on DynamoDB Local. Every test here failed on the code before its fix; the
// comment on each says how.

import (
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestConsumePINRejectsImpossiblePIN (item 12): a PIN that can never match
// (shorter than 4 or longer than 32 characters, counted as characters) is a
// 400 naming pin, with nothing written and no attempt spent. Before the fix
// "123" spent a guess (403 invalid_pin) and 33 two-byte characters did too.
func TestConsumePINRejectsImpossiblePIN(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"ip","userId":"u","pin":"2468","maxPinAttempts":3}`)
	for _, pin := range []string{"123", strings.Repeat("é", 33), strings.Repeat("7", 33)} {
		r := do(t, env, "POST", "/actions/ip/consume", `{"pin":"`+pin+`"}`)
		expect(t, env, r, 400, "invalid_request", none)
		if r.Str("field") != "pin" {
			t.Fatalf("pin %q: %s", pin, r.Raw)
		}
	}
	if g := do(t, env, "GET", "/actions/ip", ""); g.Body["pinAttemptsRemaining"] != 3.0 {
		t.Fatalf("attempts spent by impossible PINs: %s", g.Raw)
	}
	// 32 characters of four bytes each are a PIN: counted as characters.
	long := strings.Repeat("😀", 32)
	create(t, env, `{"actionId":"ip32","userId":"u","pin":"`+long+`"}`)
	if r := do(t, env, "POST", "/actions/ip32/consume", `{"pin":"`+long+`"}`); r.Status != 200 {
		t.Fatalf("32-character PIN: %d %s", r.Status, r.Raw)
	}
}

// TestUserIDDotSegments (item 13): userId "." and ".." are refused like
// actionId (no URL can address such a user to list or cancel its actions).
// Before the fix both were created (201).
func TestUserIDDotSegments(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for _, u := range []string{".", ".."} {
		r := do(t, env, "POST", "/actions", `{"userId":"`+u+`"}`)
		expect(t, env, r, 400, "invalid_request", none)
		if r.Str("field") != "userId" {
			t.Fatalf("userId %q: %s", u, r.Raw)
		}
		for _, route := range []struct{ method, path string }{{"GET", "/users/" + u + "/actions"}, {"POST", "/users/" + u + "/actions/cancel"}} {
			ev := events.APIGatewayV2HTTPRequest{PathParameters: map[string]string{"userId": u}}
			h := env.API.ListUser
			if route.method == "POST" {
				h = env.API.CancelUser
			}
			res, _ := h(t.Context(), ev)
			if res.StatusCode != 400 || !strings.Contains(res.Body, `"field":"userId"`) {
				t.Errorf("%s %s: %d %s", route.method, route.path, res.StatusCode, res.Body)
			}
		}
	}
	// Dots inside a userId are fine.
	create(t, env, `{"userId":"a.b..c"}`)
}

// TestErrorBodyBounded (item 15): the field of an error is a bounded path.
// Before the fix a 10,000-deep payload answered a 40 KB error naming
// payload.0.0.0… and an unknown 60 KB member name was echoed twice.
func TestErrorBodyBounded(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	for _, tc := range []struct{ body, field string }{
		{`{"userId":"u","payload":` + deep + `}`, "payload"},
		{`{"userId":"u","` + strings.Repeat("x", 60000) + `":1}`, "x"},
		{`{"userId":"u","metadata":{"a":` + deep[:20000] + `}}`, "metadata"},
	} {
		r := do(t, env, "POST", "/actions", tc.body)
		expect(t, env, r, 400, "invalid_request", none)
		if len(r.Raw) > 1024 || !strings.HasPrefix(r.Str("field"), tc.field) {
			t.Errorf("error of %d bytes, field %.80q…", len(r.Raw), r.Str("field"))
		}
		t.Logf("%d-byte body: %d-byte error, field %q", len(tc.body), len(r.Raw), r.Str("field"))
	}
}
