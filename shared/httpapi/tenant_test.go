package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/server"
)

const (
	tenants = `{"alpha":["arn:aws:iam::111122223333:role/alpha-*"],"beta":["beta-svc"]}`
	alpha   = "arn:aws:sts::111122223333:assumed-role/alpha-app/session-1"
	beta    = "arn:aws:sts::111122223333:assumed-role/beta-svc/session-9"
)

func withTenants(o *server.Options) { o.Tenants = tenants }

// as sends a request as the given IAM principal (the local server's
// X-Exactonce-Caller header; in AWS, API Gateway's IAM authorizer).
func as(t *testing.T, env *testkit.Env, who, method, path, body string, headers ...string) *testkit.Response {
	t.Helper()
	return do(t, env, method, path, body, append([]string{"X-Exactonce-Caller", who}, headers...)...)
}

var requestIDField = regexp.MustCompile(`"requestId":"[0-9a-f]+"`)

// TestTenantIsolation: two tenants on every route. Another tenant's action
// or key answers exactly like one that does not exist, both tenants can
// use the same ids, and each call still costs one request.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, withTenants)
	// The same id in both tenants.
	a := as(t, env, alpha, "POST", "/actions", `{"actionId":"coupon-42","userId":"ua","pin":"2468","payload":"alpha-secret"}`)
	b := as(t, env, beta, "POST", "/actions", `{"actionId":"coupon-42","userId":"ub"}`)
	if a.Status != 201 || b.Status != 201 {
		t.Fatalf("same id in two tenants: %s / %s", a.Raw, b.Raw)
	}
	if g := as(t, env, beta, "GET", "/actions/coupon-42", ""); g.Str("userId") != "ub" {
		t.Fatalf("beta reads its own coupon-42: %s", g.Raw)
	}
	as(t, env, alpha, "POST", "/actions", `{"actionId":"only-alpha","userId":"ua","pin":"2468","maxPinAttempts":1,"payload":"p"}`)
	env.Counter.Take()

	// Beta against alpha's action, and against an id nobody has: the same
	// answers (but for the request id), the same one request.
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/actions/%s", ""},
		{"POST", "/actions/%s/consume", ``},
		{"POST", "/actions/%s/consume", `{"pin":"0000"}`},
		{"POST", "/actions/%s/consume", `{"pin":"2468"}`},
		{"POST", "/actions/%s/cancel", ``},
	} {
		theirs := as(t, env, beta, tc.method, strings.Replace(tc.path, "%s", "only-alpha", 1), tc.body)
		cost := env.Counter.Take()
		nobodys := as(t, env, beta, tc.method, strings.Replace(tc.path, "%s", "nobody-has", 1), tc.body)
		if theirs.Status != 404 || theirs.Str("error") != "action_not_found" ||
			requestIDField.ReplaceAllString(theirs.Raw, "") != requestIDField.ReplaceAllString(strings.Replace(nobodys.Raw, "nobody-has", "only-alpha", 1), "") {
			t.Errorf("%s %s as beta: %d %s; a missing id: %s", tc.method, tc.path, theirs.Status, theirs.Raw, nobodys.Raw)
		}
		if fmtCost(cost) != fmtCost(env.Counter.Take()) {
			t.Errorf("%s %s: another tenant's item and a missing one cost differently", tc.method, tc.path)
		}
	}
	// No action_exists leak: beta may create an action of that id, its own.
	if r := as(t, env, beta, "POST", "/actions", `{"actionId":"only-alpha","userId":"ub"}`); r.Status != 201 {
		t.Fatalf("beta creating an id alpha has: %s", r.Raw)
	}
	// Alpha's action is untouched: no guess counted, not consumed or canceled.
	g := as(t, env, alpha, "GET", "/actions/only-alpha", "")
	if g.Str("state") != "active" || g.Body["pinAttemptsRemaining"] != 1.0 || g.Str("userId") != "ua" {
		t.Fatalf("alpha's action after beta's attempts: %s", g.Raw)
	}
	if r := as(t, env, alpha, "POST", "/actions/only-alpha/consume", `{"pin":"2468"}`); r.Status != 200 || r.Body["payload"] != "p" {
		t.Fatalf("alpha consumes its own: %s", r.Raw)
	}

	// Keys: beta cannot read, complete or release alpha's key; its claim of
	// the same name is its own key and leaves alpha's lease alone.
	claim := as(t, env, alpha, "POST", "/keys/job-1/claim", `{"fingerprint":"f"}`)
	tok := claim.Str("token")
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/keys/job-1", ""},
		{"POST", "/keys/job-1/complete", `{"token":"` + tok + `","response":{"stolen":true}}`},
		{"POST", "/keys/job-1/release", `{"token":"` + tok + `"}`},
	} {
		r := as(t, env, beta, tc.method, tc.path, tc.body)
		if r.Status != 404 || r.Str("error") != "key_not_found" {
			t.Errorf("%s %s as beta: %d %s", tc.method, tc.path, r.Status, r.Raw)
		}
	}
	if r := as(t, env, beta, "POST", "/keys/job-1/claim", `{"fingerprint":"f"}`); r.Status != 201 || r.Str("token") == tok {
		t.Fatalf("beta's claim of job-1: %s", r.Raw)
	}
	if r := as(t, env, alpha, "POST", "/keys/job-1/complete", `{"token":"`+tok+`","response":1}`); r.Status != 200 {
		t.Fatalf("alpha completes its key: %s", r.Raw)
	}
	if r := as(t, env, beta, "GET", "/keys/job-1", ""); r.Str("state") != "in_progress" {
		t.Fatalf("beta's job-1 must be its own: %s", r.Raw)
	}
}

func fmtCost(m map[string]int) string {
	var b strings.Builder
	for _, op := range []string{"GetItem", "UpdateItem"} {
		b.WriteString(op)
		b.WriteByte('=')
		b.WriteByte(byte('0' + m[op]))
	}
	return b.String()
}

// TestUnmappedCaller: a caller in no tenant gets 403 forbidden on every
// route and nothing is written or read.
func TestUnmappedCaller(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, withTenants)
	for _, who := range []string{"", "arn:aws:iam::999999999999:user/mallory", "arn:aws:sts::111122223333:assumed-role/beta-svc-2/s"} {
		for _, tc := range []struct{ method, path, body string }{
			{"POST", "/actions", `{"userId":"u"}`}, {"GET", "/actions/x", ""}, {"POST", "/actions/x/consume", ""},
			{"POST", "/actions/x/cancel", ""}, {"POST", "/keys/k/claim", `{"fingerprint":"f"}`}, {"GET", "/keys/k", ""},
			{"POST", "/keys/k/complete", `{"token":"00000000000000000000000000000000","response":1}`},
			{"POST", "/keys/k/release", `{"token":"00000000000000000000000000000000"}`},
		} {
			var r *testkit.Response
			if who == "" {
				r = do(t, env, tc.method, tc.path, tc.body) // the local default principal, not in the map
			} else {
				r = as(t, env, who, tc.method, tc.path, tc.body)
			}
			expect(t, env, r, 403, "forbidden", none)
		}
	}
}

// TestJWTScopes: with a JWT authorizer, each route needs its scope (a
// create that supersedes, the cancel routes' too), and the tenant comes
// from the configured claim.
func TestJWTScopes(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, withTenants)
	ev := func(route, scope string) events.APIGatewayV2HTTPRequest {
		var e events.APIGatewayV2HTTPRequest
		e.RouteKey = route
		e.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "beta-svc", "scope": scope}},
		}
		e.PathParameters = map[string]string{"actionId": "j1"}
		e.Body = `{"actionId":"j1","userId":"u"}`
		return e
	}
	ctx := context.Background()
	if r, _ := env.API.Create(ctx, ev("POST /actions", "actions:read")); r.StatusCode != 403 || !strings.Contains(r.Body, "actions:create") {
		t.Fatalf("create without actions:create: %d %s", r.StatusCode, r.Body)
	}
	if r, _ := env.API.Create(ctx, ev("POST /actions", "actions:read actions:create")); r.StatusCode != 201 {
		t.Fatalf("create with its scope: %d %s", r.StatusCode, r.Body)
	}
	// A create that supersedes cancels the user's earlier action of its
	// kind: it needs actions:cancel too, and without it nothing is written.
	first := ev("POST /actions", "actions:create")
	first.Body = `{"actionId":"s1","userId":"victim","kind":"login"}`
	if r, _ := env.API.Create(ctx, first); r.StatusCode != 201 {
		t.Fatalf("create s1: %d %s", r.StatusCode, r.Body)
	}
	sup := ev("POST /actions", "actions:create")
	sup.Body = `{"actionId":"s2","userId":"victim","kind":"login","supersede":true}`
	if r, _ := env.API.Create(ctx, sup); r.StatusCode != 403 || !strings.Contains(r.Body, "actions:cancel") {
		t.Fatalf("supersede without actions:cancel: %d %s", r.StatusCode, r.Body)
	}
	for _, id := range []string{"s1", "s2"} {
		if r := as(t, env, beta, "GET", "/actions/"+id, ""); (id == "s1") != (r.Status == 200 && r.Str("state") == "active") {
			t.Fatalf("after a refused supersede, %s: %s", id, r.Raw)
		}
	}
	sup = ev("POST /actions", "actions:create actions:cancel")
	sup.Body = `{"actionId":"s2","userId":"victim","kind":"login","supersede":true}`
	if r, _ := env.API.Create(ctx, sup); r.StatusCode != 201 {
		t.Fatalf("supersede with actions:cancel: %d %s", r.StatusCode, r.Body)
	}
	if r := as(t, env, beta, "GET", "/actions/s1", ""); r.Str("cancelReason") != "superseded" {
		t.Fatalf("s1 after the supersede: %s", r.Raw)
	}
	if r, _ := env.API.Consume(ctx, ev("POST /actions/{actionId}/consume", "actions:read")); r.StatusCode != 403 {
		t.Fatalf("consume without actions:consume: %d %s", r.StatusCode, r.Body)
	}
	if r, _ := env.API.Get(ctx, ev("GET /actions/{actionId}", "actions:read")); r.StatusCode != 200 {
		t.Fatalf("get with actions:read: %d %s", r.StatusCode, r.Body)
	}
	// The claim put the action in beta's key space.
	if r := as(t, env, beta, "GET", "/actions/j1", ""); r.Status != 200 {
		t.Fatalf("beta (by IAM) sees the action beta (by JWT) created: %s", r.Raw)
	}
	if r := as(t, env, alpha, "GET", "/actions/j1", ""); r.Status != 404 {
		t.Fatalf("alpha sees beta's action: %s", r.Raw)
	}
}

// TestEventsCarryTheTenant: the same id consumed in two tenants gives two
// events, each with its tenant and its own event id.
func TestEventsCarryTheTenant(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, withTenants, testkit.WithEvents)
	for _, who := range []string{alpha, beta} {
		as(t, env, who, "POST", "/actions", `{"actionId":"coupon-7","userId":"u"}`)
		if r := as(t, env, who, "POST", "/actions/coupon-7/consume", ``); r.Status != 200 {
			t.Fatal(r.Raw)
		}
	}
	deadline := time.Now().Add(testkit.Patience)
	for len(env.Bus.Events()) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	got := map[string]string{}
	for _, e := range env.Bus.Events() {
		var d struct{ Tenant, ActionID, EventID string }
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			t.Fatal(err)
		}
		if d.ActionID != "coupon-7" {
			t.Fatalf("event for %q", d.ActionID)
		}
		got[d.Tenant] = d.EventID
	}
	if len(got) != 2 || got["alpha"] == "" || got["beta"] == "" || got["alpha"] == got["beta"] {
		t.Fatalf("events by tenant: %v", got)
	}
}

// TestDerivedIDsDifferAcrossTenants: "PINs and payloads are bound to the
// item key too" and derived ids are "unguessable", so an id derived from an
// Idempotency-Key is bound to its tenant: the same key ("order-77") in two
// tenants names two actions. Before the fix the id was the same in every
// tenant: a tenant that guessed or observed another tenant's key (order
// numbers) learned that tenant's action id, which magic links use as their
// secret part.
func TestDerivedIDsDifferAcrossTenants(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, withTenants)
	a := as(t, env, alpha, "POST", "/actions", `{"userId":"ua"}`, "Idempotency-Key", "order-77")
	b := as(t, env, beta, "POST", "/actions", `{"userId":"ub"}`, "Idempotency-Key", "order-77")
	if a.Status != 201 || b.Status != 201 {
		t.Fatalf("%s / %s", a.Raw, b.Raw)
	}
	if a.Str("actionId") == b.Str("actionId") {
		t.Fatalf("tenant beta derives tenant alpha's action id from the key alone: %s", a.Str("actionId"))
	}
}

// TestTenantIsolationOnUseAndUserRoutes: the use and user routes, as
// TestTenantIsolation the action and key routes. Another tenant's
// multi-use action answers and costs exactly as one that never existed,
// with and without a key; another tenant's user lists, cancels and
// supersedes nothing of it; a cancel-all key is the tenant's own; a cursor
// from another tenant's listing lists nothing.
func TestTenantIsolationOnUseAndUserRoutes(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, withTenants)
	for _, b := range []string{
		`{"actionId":"l1","userId":"victim","kind":"login"}`,
		`{"actionId":"l2","userId":"victim","kind":"login"}`,
		`{"actionId":"mu","userId":"victim","maxUses":3,"releasable":true}`,
	} {
		if r := as(t, env, alpha, "POST", "/actions", b); r.Status != 201 {
			t.Fatal(r.Raw)
		}
	}
	if r := as(t, env, alpha, "POST", "/actions/mu/consume", `{"useId":"laptop"}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	env.Counter.Take()
	norm := func(r *testkit.Response, id string) string {
		return fmt.Sprint(r.Status) + requestIDField.ReplaceAllString(strings.ReplaceAll(r.Raw, id, "ID"), "")
	}
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/actions/%s/uses", ""},
		{"GET", "/actions/%s/uses?limit=1", ""},
		{"GET", "/actions/%s/uses?cursor=" + "MC5sYXB0b3A", ""},
		{"GET", "/actions/%s/uses?cursor=bad!", ""},
		{"POST", "/actions/%s/uses/laptop/release", ""},
		{"POST", "/actions/%s/uses/laptop/release", "{}"},
		{"POST", "/actions/%s/consume", `{"useId":"laptop"}`},
		{"POST", "/actions/%s/consume", `{"useId":"phone"}`},
		{"POST", "/actions/%s/consume", ``},
		{"POST", "/actions/%s/cancel", ``},
	} {
		for _, h := range [][]string{nil, {"Idempotency-Key", "x-" + tc.path + tc.body}} {
			theirs := as(t, env, beta, tc.method, strings.Replace(tc.path, "%s", "mu", 1), tc.body, h...)
			c1 := env.Counter.Take()
			nobody := as(t, env, beta, tc.method, strings.Replace(tc.path, "%s", "never1", 1), tc.body, h...)
			c2 := env.Counter.Take()
			if norm(theirs, "mu") != norm(nobody, "never1") || fmt.Sprint(c1) != fmt.Sprint(c2) {
				t.Errorf("%s %s %v: theirs %d %s %v; never-existed %d %s %v", tc.method, tc.path, h, theirs.Status, theirs.Raw, c1, nobody.Status, nobody.Raw, c2)
			}
		}
	}
	// user routes
	if r := as(t, env, beta, "GET", "/users/victim/actions", ""); r.Status != 200 || len(ids(r)) != 0 {
		t.Errorf("beta lists alpha's victim: %s", r.Raw)
	}
	if r := as(t, env, beta, "POST", "/users/victim/actions/cancel", `{"kind":"login"}`, "Idempotency-Key", "ca-1"); r.Status != 200 || r.Body["canceled"] != 0.0 {
		t.Errorf("beta cancel-all alpha's victim: %s", r.Raw)
	}
	if r := as(t, env, alpha, "POST", "/users/victim/actions/cancel", `{"kind":"nothing"}`, "Idempotency-Key", "ca-2"); r.Status != 200 {
		t.Errorf("alpha cancel-all: %s", r.Raw)
	}
	// the same key in beta with another body: beta's own call, not 422
	if r := as(t, env, beta, "POST", "/users/victim/actions/cancel", `{"kind":"other"}`, "Idempotency-Key", "ca-2"); r.Status != 200 {
		t.Errorf("beta reuses alpha's cancel-all key: %d %s", r.Status, r.Raw)
	}
	if r := as(t, env, beta, "POST", "/actions", `{"actionId":"b1","userId":"victim","kind":"login","supersede":true}`); r.Status != 201 {
		t.Fatal(r.Raw)
	}
	for _, id := range []string{"l1", "l2", "mu"} {
		if g := as(t, env, alpha, "GET", "/actions/"+id, ""); g.Str("state") != "active" {
			t.Errorf("alpha's %s after beta's calls: %s", id, g.Raw)
		}
	}
	if r := as(t, env, alpha, "GET", "/actions/mu/uses", ""); !strings.Contains(r.Raw, "laptop") {
		t.Errorf("alpha's use gone: %s", r.Raw)
	}
	// alpha's cursor lists nothing for beta
	c := as(t, env, alpha, "GET", "/users/victim/actions?limit=1", "").Str("cursor")
	if c == "" {
		t.Fatal("alpha's first page of three has no cursor")
	}
	if r := as(t, env, beta, "GET", "/users/victim/actions?cursor="+c, ""); r.Status == 200 && len(ids(r)) > 0 {
		t.Errorf("beta with alpha's cursor lists: %s", r.Raw)
	}
}
