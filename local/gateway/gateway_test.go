package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// TestRoutesOnTheDecodedPath: an HTTP API decodes the path before routing
// and gives the function the decoded segments, so an escaped '/' splits a
// segment (no route), a '?' or '#' cuts the path, a '%' arrives decoded.
func TestRoutesOnTheDecodedPath(t *testing.T) {
	m := New()
	var got events.APIGatewayV2HTTPRequest
	m.Route("GET /users/{userId}/actions", func(_ context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		got = ev
		return events.APIGatewayV2HTTPResponse{StatusCode: 200}, nil
	})
	for _, tc := range []struct {
		path   string
		status int
		userID string
	}{
		{"/users/u1/actions", 200, "u1"},
		{"/users/caf%C3%A9%20x/actions", 200, "café x"},
		{"/users/a%25b/actions", 200, "a%b"},
		{"/users/a%2Fb/actions", 404, ""},
		{"/users/a%3Fb/actions", 404, ""},
		{"/users/a%23b/actions", 404, ""},
	} {
		got = events.APIGatewayV2HTTPRequest{}
		w := httptest.NewRecorder()
		m.ServeHTTP(w, httptest.NewRequest("GET", tc.path, nil))
		if w.Code != tc.status || got.PathParameters["userId"] != tc.userID {
			t.Errorf("%s: %d userId %q, want %d %q", tc.path, w.Code, got.PathParameters["userId"], tc.status, tc.userID)
		}
		if tc.status == 200 && got.RawPath != "/users/"+tc.userID+"/actions" {
			t.Errorf("%s: rawPath %q, want the decoded path", tc.path, got.RawPath)
		}
	}
}

// TestRouteMatchesItsMethodOnly: an HTTP API route is a method and a path
// (there is no ANY route here), so HEAD /actions/x matches no route, 404
// {"message":"Not Found"}, and never runs the GET function (net/http's
// pattern "GET /path" also matches HEAD: locally a HEAD ran the handler).
func TestRouteMatchesItsMethodOnly(t *testing.T) {
	m := New()
	ran := 0
	m.Route("GET /actions/{actionId}", func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		ran++
		return events.APIGatewayV2HTTPResponse{StatusCode: 200}, nil
	})
	for method, want := range map[string]int{"GET": 200, "HEAD": 404, "POST": 404} {
		w := httptest.NewRecorder()
		m.ServeHTTP(w, httptest.NewRequest(method, "/actions/x", nil))
		if w.Code != want {
			t.Errorf("%s: %d, want %d", method, w.Code, want)
		}
	}
	if ran != 1 {
		t.Errorf("the GET function ran %d times, want once (for GET)", ran)
	}
}

// TestBodyBase64ByContentType: an HTTP API passes JSON and text bodies as
// they are and base64-encodes every other one (form data such as curl -d
// sends, binary, a body without Content-Type), UTF-8 or not.
func TestBodyBase64ByContentType(t *testing.T) {
	for _, tc := range []struct {
		contentType string
		base64      bool
	}{
		{"application/json", false}, {"application/json; charset=utf-8", false}, {"text/plain", false},
		{"application/problem+json", false}, {"application/xml", false},
		{"application/x-www-form-urlencoded", true}, {"application/octet-stream", true}, {"", true},
	} {
		r := httptest.NewRequest("POST", "/actions", strings.NewReader(`{"userId":"u1"}`))
		if tc.contentType != "" {
			r.Header.Set("Content-Type", tc.contentType)
		}
		ev, err := Event(r, "POST /actions")
		if err != nil {
			t.Fatal(err)
		}
		body := ev.Body
		if ev.IsBase64Encoded {
			b, _ := base64.StdEncoding.DecodeString(ev.Body)
			body = string(b)
		}
		if ev.IsBase64Encoded != tc.base64 || body != `{"userId":"u1"}` {
			t.Errorf("%q: isBase64Encoded %v body %q, want %v", tc.contentType, ev.IsBase64Encoded, ev.Body, tc.base64)
		}
	}
}

// TestCallerIsASession: API Gateway's IAM authorizer never gives a role's
// ARN: a role calls as one of its sessions.
func TestCallerIsASession(t *testing.T) {
	for in, want := range map[string]string{
		"arn:aws:iam::111122223333:role/acme-app":                  "arn:aws:sts::111122223333:assumed-role/acme-app/s1",
		"arn:aws:iam::111122223333:role/team/acme-app":             "arn:aws:sts::111122223333:assumed-role/acme-app/s1",
		"arn:aws:iam::111122223333:user/alice":                     "arn:aws:iam::111122223333:user/alice",
		"arn:aws:sts::111122223333:assumed-role/acme-app/deploy-1": "arn:aws:sts::111122223333:assumed-role/acme-app/deploy-1",
	} {
		if got := CallerARN(in, "s1"); got != want {
			t.Errorf("CallerARN(%s) = %s, want %s", in, got, want)
		}
	}
	r := httptest.NewRequest("GET", "/actions/a", nil)
	r.Header.Set(HeaderCaller, "arn:aws:iam::111122223333:role/acme-app")
	ev, _ := Event(r, "GET /actions/{actionId}")
	if iam := ev.RequestContext.Authorizer.IAM; iam.UserARN != "arn:aws:sts::111122223333:assumed-role/acme-app/local" || iam.AccountID != "111122223333" {
		t.Errorf("authorizer %+v", iam)
	}
}

// TestJWTClaimsAsAPIGatewayGivesThem: claims are strings, numbers as
// integers, arrays as "[a b]"; the audience is aud, or client_id without it.
func TestJWTClaimsAsAPIGatewayGivesThem(t *testing.T) {
	var claims map[string]any
	_ = json.Unmarshal([]byte(`{"sub":"u-1","exp":1900000000,"aud":["a","b"],"email_verified":true,"ratio":1.5,"cognito:groups":["admins","ops"]}`), &claims)
	got := JWTClaims(claims)
	for k, want := range map[string]string{"sub": "u-1", "exp": "1900000000", "aud": "[a b]", "email_verified": "true", "ratio": "1.5", "cognito:groups": "[admins ops]"} {
		if got[k] != want {
			t.Errorf("claim %s = %q, want %q", k, got[k], want)
		}
	}
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		claims string
		ok     bool
	}{
		{`{"iss":"https://i","aud":"api","exp":1900000000}`, true},
		{`{"iss":"https://i","aud":["x","api"],"exp":1900000000}`, true},
		{`{"iss":"https://i","client_id":"api","exp":1900000000}`, true}, // a Cognito access token
		{`{"iss":"https://i","aud":"x","client_id":"api","exp":1900000000}`, false},
		{`{"iss":"https://other","aud":"api","exp":1900000000}`, false},
		{`{"iss":"https://i","aud":"api","exp":1700000000}`, false},
		{`{"iss":"https://i","aud":"api","exp":1900000000,"nbf":1850000000}`, false},
		{`{"iss":"https://i","aud":"api"}`, false},
	} {
		var c map[string]any
		_ = json.Unmarshal([]byte(tc.claims), &c)
		if err := CheckJWT(c, "https://i", []string{"api"}, now); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.claims, err, tc.ok)
		}
	}
}

// TestNonCanonicalPathIs404: a path not listed is 404 {"message":"Not
// Found"}, as API Gateway answers it (docs/http-api.md: "make run answers
// the same"). The local gateway answered one with an empty or dot segment
// (//actions, /actions/s1//consume, /actions/x/../s1/consume) with
// net/http's 307 to the cleaned path, and a client that follows redirects
// re-sent the POST there: it landed on /actions/s1/consume.
func TestNonCanonicalPathIs404(t *testing.T) {
	m := New()
	ok := func(_ context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "routed"}, nil
	}
	m.Route("POST /actions/{actionId}/consume", ok)
	m.Route("POST /actions", ok)
	for _, p := range []string{"//actions", "/actions/", "/actions/s1//consume", "/actions/./s1/consume",
		"/actions/x/../s1/consume", "/actions/x/%2E%2E/s1/consume"} {
		req := httptest.NewRequest("POST", "http://h"+p, strings.NewReader("{}"))
		req.RequestURI = p
		w := httptest.NewRecorder()
		m.ServeHTTP(w, req)
		if w.Code != 404 || !strings.Contains(w.Body.String(), `"Not Found"`) {
			t.Errorf("POST %s: %d %q Location %q, want 404 Not Found", p, w.Code, w.Body.String(), w.Header().Get("Location"))
		}
	}
	req := httptest.NewRequest("POST", "http://h/actions/s1/consume", strings.NewReader("{}"))
	w := httptest.NewRecorder()
	m.ServeHTTP(w, req)
	if w.Code != 200 {
		t.Errorf("the canonical path: %d %q", w.Code, w.Body.String())
	}
}
