package httpapi_test

// One rule for values that say nothing (issue 30 item 3): a query
// parameter or a body member is absent or holds a value it takes. Sent
// empty (a query parameter, a cancel-all's kind, a create's or consume's
// member that takes 1 character or more) or null (a body member), it is
// 400 naming it, and nothing is read or written.

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
)

// refused checks a 400 invalid_request naming field that cost no DynamoDB
// request.
func refused(t *testing.T, env *testkit.Env, what string, r *testkit.Response, field string) {
	t.Helper()
	if got := env.Counter.Take(); r.Status != 400 || r.Str("error") != "invalid_request" || r.Str("field") != field || len(got) != 0 {
		t.Errorf("%s: %d %s (DynamoDB requests %v), want 400 naming %s and no request", what, r.Status, strings.TrimSpace(r.Raw), got, field)
	}
}

// TestEmptyQueryParameter: ?cursor= was 400 on /actions/{id}/uses but the
// first page on /users/{id}/actions (and ?kind=, ?state= every kind and
// state there). Sent empty, every list parameter is 400 naming it.
func TestEmptyQueryParameter(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"q1","userId":"qu","maxUses":2}`)
	for _, c := range []struct{ path, field string }{
		{"/users/qu/actions?cursor=", "cursor"},
		{"/users/qu/actions?limit=5&cursor=", "cursor"},
		{"/users/qu/actions?kind=", "kind"},
		{"/users/qu/actions?state=", "state"},
		{"/users/qu/actions?limit=", "limit"},
		{"/actions/q1/uses?cursor=", "cursor"},
		{"/actions/q1/uses?limit=", "limit"},
	} {
		refused(t, env, c.path, do(t, env, "GET", c.path, ""), c.field)
	}
}

// TestCancelAllEmptyKind: {"kind":""} canceled every kind, as if kind were
// absent; "" could as well mean the actions without a kind (as a
// superseding create of a kind-less action reads it). It is 400 naming
// kind, and cancels nothing.
func TestCancelAllEmptyKind(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"ek1","userId":"eu","kind":"login"}`)
	create(t, env, `{"actionId":"ek2","userId":"eu"}`)
	refused(t, env, `{"kind":""}`, do(t, env, "POST", "/users/eu/actions/cancel", `{"kind":""}`, "Idempotency-Key", "ek"), "kind")
	for _, id := range []string{"ek1", "ek2"} {
		if g := do(t, env, "GET", "/actions/"+id, ""); g.Str("state") != "active" {
			t.Errorf("%s after a refused cancel-all: %s", id, g.Raw)
		}
	}
}

// TestEmptyStringMember: "" for a create's actionId, kind, activeAt,
// expiresAt or pin, or a consume's useId, was taken as absent and written:
// "pin":"" made an action anyone can consume without a PIN (201,
// pinProtected false), and {"useId":""} consumed a single-use action. None
// of them takes "" (api/openapi.yaml: 1 character or more, a date-time, a
// PIN of 4 to 32): it is 400 naming the member, nothing written. A
// consume's "pin":"" stays "no PIN", as documented.
func TestEmptyStringMember(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"single","userId":"eu"}`)
	for _, c := range []struct{ path, body, field string }{
		{"/actions", `{"userId":"eu","pin":""}`, "pin"},
		{"/actions", `{"userId":"eu","pin":"","payload":"secret"}`, "pin"},
		{"/actions", `{"actionId":"","userId":"eu"}`, "actionId"},
		{"/actions", `{"userId":"eu","kind":""}`, "kind"},
		{"/actions", `{"userId":"eu","activeAt":""}`, "activeAt"},
		{"/actions", `{"userId":"eu","expiresAt":""}`, "expiresAt"},
		{"/actions/single/consume", `{"useId":""}`, "useId"},
	} {
		refused(t, env, c.path+" "+c.body, do(t, env, "POST", c.path, c.body), c.field)
	}
	if g := do(t, env, "GET", "/actions/single", ""); g.Str("state") != "active" {
		t.Errorf("single after a refused consume: %s", g.Raw)
	}
	if r := do(t, env, "POST", "/actions/single/consume", `{"pin":""}`); r.Status != 200 {
		t.Errorf(`a consume's "pin":"" is no PIN: %d %s`, r.Status, r.Raw)
	}
}

// TestNullMember: null for maxUses, releasable or useId (and every other
// member) was taken as absent: a default the caller did not choose, and a
// body that fingerprints apart from the same call without the member. A
// member is a value of its type or absent: null is 400 naming it, nothing
// written. Where a member takes any JSON value (payload, a key's
// response), null is that value.
func TestNullMember(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"multi","userId":"nu","maxUses":2}`)
	create(t, env, `{"actionId":"single","userId":"nu"}`)
	for _, c := range []struct{ path, body, field string }{
		{"/actions", `{"actionId":"n1","userId":"nu","maxUses":null}`, "maxUses"},
		{"/actions", `{"actionId":"n1","userId":"nu","maxUses":2,"releasable":null}`, "releasable"},
		{"/actions/multi/consume", `{"useId":null}`, "useId"},
		{"/actions/single/consume", `{"useId":null}`, "useId"},
		{"/actions", `{"actionId":null,"userId":"nu"}`, "actionId"},
		{"/actions", `{"userId":"nu","kind":null}`, "kind"},
		{"/actions", `{"userId":"nu","metadata":null}`, "metadata"},
		{"/actions", `{"userId":"nu","metadata":{"campaign":null}}`, "metadata.campaign"},
		{"/actions", `{"userId":"nu","pin":null,"maxPinAttempts":null}`, "pin"},
		{"/actions", `{"userId":"nu","supersede":null}`, "supersede"},
		{"/actions/single/consume", `{"reason":null}`, "reason"},
		{"/actions/single/cancel", `{"reason":null}`, "reason"},
		{"/users/nu/actions/cancel", `{"kind":null}`, "kind"},
		{"/keys/nk/claim", `{"fingerprint":"f","leaseSeconds":null}`, "leaseSeconds"},
	} {
		refused(t, env, c.path+" "+c.body, do(t, env, "POST", c.path, c.body), c.field)
	}
	for _, id := range []string{"multi", "single"} {
		if g := do(t, env, "GET", "/actions/"+id, ""); g.Str("state") != "active" || g.Body["usesHeld"] != nil && g.Body["usesHeld"] != 0.0 {
			t.Errorf("%s after refused calls: %s", id, g.Raw)
		}
	}
	// Any JSON value: null is a value.
	if r := do(t, env, "POST", "/actions", `{"actionId":"np","userId":"nu","payload":null}`); r.Status != 201 {
		t.Fatalf("payload null: %d %s", r.Status, r.Raw)
	}
	if r := do(t, env, "POST", "/actions/np/consume", ``); r.Status != 200 || !strings.Contains(r.Raw, `"payload":null`) {
		t.Fatalf("consume of a null payload: %d %s", r.Status, r.Raw)
	}
	claim := do(t, env, "POST", "/keys/nr/claim", `{"fingerprint":"f"}`)
	if r := do(t, env, "POST", "/keys/nr/complete", `{"token":"`+claim.Str("token")+`","response":null}`); r.Status != 200 {
		t.Fatalf("complete with a null response: %d %s", r.Status, r.Raw)
	}
}

// TestForgedUserCursor: a user-list cursor is opaque; one this API did not
// hand out is 400 naming cursor, never 500, and reads nothing. The cursors
// hold the start-key shapes DynamoDB refuses (a key over 2 KB, attributes of
// the wrong type, key attributes missing, attributes added) and others no
// page ever returns. (Before, a key over 2 KB reached DynamoDB, which
// refused it: 500.)
func TestForgedUserCursor(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for _, id := range []string{"f1", "f2", "f3"} {
		create(t, env, `{"actionId":"`+id+`","userId":"fu"}`)
	}
	page := do(t, env, "GET", "/users/fu/actions?limit=1", "")
	raw, err := base64.RawURLEncoding.DecodeString(page.Str("cursor"))
	if err != nil || !strings.Contains(string(raw), `"k":"f3"`) {
		t.Fatalf("a real cursor: %q %v", raw, err)
	}
	if r := do(t, env, "GET", "/users/fu/actions?limit=1&cursor="+page.Str("cursor"), ""); r.Status != 200 || strings.Join(ids(r), ",") != "f2" {
		t.Fatalf("the real cursor: %d %s", r.Status, r.Raw)
	}
	env.Counter.Take()
	c := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	long := strings.Repeat("x", 3000)
	for _, cur := range []struct{ what, cursor string }{
		{"a key over 2 KB", c(`{"c":1,"k":"` + long + `"}`)},
		{"a key over 2 KB, of another shape", c(`{"c":1,"k":"f` + strings.Repeat("é", 1100) + `"}`)},
		{"the time a string", c(`{"c":"1","k":"f3"}`)},
		{"the key a number", c(`{"c":1,"k":3}`)},
		{"the key an array", c(`{"c":1,"k":["f3"]}`)},
		{"a fractional time", c(`{"c":1.5,"k":"f3"}`)},
		{"a time beyond an integer", c(`{"c":1e40,"k":"f3"}`)},
		{"a null time", c(`{"c":null,"k":"f3"}`)},
		{"no time", c(`{"k":"f3"}`)},
		{"no key", c(`{"c":1}`)},
		{"an empty key", c(`{"c":1,"k":""}`)},
		{"nothing", c(`{}`)},
		{"null", c(`null`)},
		{"an array", c(`[1,"f3"]`)},
		{"an attribute added", c(`{"c":1,"k":"f3","u":"u#other"}`)},
		{"another tenant's key", c(`{"c":1,"k":"t#beta#f3"}`)},
		{"a key no action has", c(`{"c":1,"k":"a b"}`)},
		{"something after the object", c(`{"c":1,"k":"f3"}}`)},
		{"another object after it", c(`{"c":1,"k":"f3"} {}`)},
		{"not JSON", c(`f3`)},
		{"not base64", "f3!"},
		{"padded base64", base64.URLEncoding.EncodeToString([]byte(`{"c":1,"k":"f3"}`))},
	} {
		refused(t, env, cur.what, do(t, env, "GET", "/users/fu/actions?cursor="+cur.cursor, ""), "cursor")
	}
}
