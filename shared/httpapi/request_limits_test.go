package httpapi_test

// Input outside what the API accepts: a 400 naming the field, nothing
// written, an error of bounded size.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestOutOfRangeInputRefused: inputs that used to be accepted or answered
// wrongly are a 400 naming the field, with nothing written: actionId "." and
// "..", in a body or a path (consume, get, claim); a UTC offset of +24:00
// or -24:00; an activeAt in the past or more than a year ahead; a /keys
// response deeper than a payload may be.
func TestOutOfRangeInputRefused(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for _, tc := range []struct{ body, field string }{
		{`{"actionId":".","userId":"u"}`, "actionId"},
		{`{"actionId":"..","userId":"u"}`, "actionId"},
		{`{"userId":"u","activeAt":"2026-12-01T00:00:00+24:00"}`, "activeAt"},
		{`{"userId":"u","expiresAt":"2099-12-01T00:00:00-24:00"}`, "expiresAt"},
		{`{"userId":"u","activeAt":"2020-01-01T00:00:00Z"}`, "activeAt"},
		{`{"userId":"u","activeAt":"` + time.Now().Add(366*24*time.Hour).UTC().Format(time.RFC3339) + `"}`, "activeAt"},
	} {
		r := do(t, env, "POST", "/actions", tc.body)
		expect(t, env, r, 400, "invalid_request", none)
		if r.Str("field") != tc.field {
			t.Errorf("%s: field %q, want %q (%s)", tc.body, r.Str("field"), tc.field, r.Raw)
		}
	}
	for _, id := range []string{".", ".."} {
		var e events.APIGatewayV2HTTPRequest
		e.PathParameters = map[string]string{"actionId": id, "key": id}
		for name, h := range map[string]func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error){
			"consume": env.API.Consume, "get": env.API.Get, "claim": env.API.Claim} {
			if r, _ := h(context.Background(), e); r.StatusCode != 400 {
				t.Errorf("%s %q: %d %s", name, id, r.StatusCode, r.Body)
			}
		}
	}

	// A /keys response as deep as a payload may be, not deeper.
	claim := do(t, env, "POST", "/keys/deep/claim", `{"fingerprint":"f"}`)
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	env.Counter.Take()
	r := do(t, env, "POST", "/keys/deep/complete", `{"token":"`+claim.Str("token")+`","response":`+deep+`}`)
	expect(t, env, r, 400, "invalid_request", none)
	if r.Str("field") != "response" {
		t.Fatal(r.Raw)
	}
}

// TestUserIDDotSegments (issue 21, item 13): userId "." and ".." are refused like
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

// TestErrorBodyBounded (issue 21, item 15): the field of an error is a bounded path.
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
