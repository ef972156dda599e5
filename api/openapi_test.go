package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	vErrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/exactonce/exactonce/api"
	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/httpapi"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func newValidator(t *testing.T) (validator.Validator, libopenapi.Document) {
	t.Helper()
	doc, err := libopenapi.NewDocument(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, errs := v.ValidateDocument(); !ok {
		for _, e := range errs {
			t.Errorf("openapi.yaml: %s", e.Error())
		}
		t.FailNow()
	}
	return v, doc
}

// documented lists "METHOD /path status" of every documented response.
func documented(t *testing.T, doc libopenapi.Document) map[string]bool {
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for code := range op.Responses.Codes.FromOldest() {
				out[strings.ToUpper(method)+" "+path+" "+code] = true
			}
		}
	}
	return out
}

// exchange is one real request to the local server.
type exchange struct {
	method, path, body string
	headers            []string
	// badRequest: the request is invalid on purpose, so only the response
	// is checked against the document.
	badRequest bool
}

var routeParam = regexp.MustCompile(`^(/actions|/keys|/users)/[^/]+`)

// TestResponsesMatchTheDocument drives every route through every outcome on
// the local server and validates each real request and response against
// openapi.yaml; then checks that every documented route and status was seen
// (500 internal aside), and that the document lists exactly the API's routes.
func TestResponsesMatchTheDocument(t *testing.T) {
	t.Parallel()
	v, doc := newValidator(t)
	docs := documented(t, doc)

	var routes []string
	for r := range (&httpapi.API{}).Routes() {
		routes = append(routes, r)
	}
	for _, r := range routes {
		if !docs[r+" 200"] && !docs[r+" 201"] {
			t.Errorf("route %s is not documented", r)
		}
	}

	seen := map[string]bool{}
	client := &http.Client{}
	run := func(env *testkit.Env, xs []exchange) map[string]string {
		bodies := map[string]string{}
		for _, x := range xs {
			req, _ := http.NewRequest(x.method, env.URL+x.path, strings.NewReader(x.body))
			if x.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			for i := 0; i+1 < len(x.headers); i += 2 {
				req.Header.Set(x.headers[i], x.headers[i+1])
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			bodies[x.method+" "+x.path] = string(raw)
			if !x.badRequest && resp.StatusCode == http.StatusBadRequest {
				t.Errorf("%s %s %s: unexpected 400 %s", x.method, x.path, x.body, raw)
			}

			// The validator reads both bodies again.
			vreq, _ := http.NewRequest(x.method, "http://127.0.0.1:8080"+x.path, strings.NewReader(x.body))
			vreq.Header = req.Header.Clone()
			resp.Body = io.NopCloser(bytes.NewReader(raw))
			var ok bool
			var errs []*vErrors.ValidationError
			if x.badRequest {
				ok, errs = v.ValidateHttpResponse(vreq, resp)
			} else {
				ok, errs = v.ValidateHttpRequestResponse(vreq, resp)
			}
			if !ok {
				for _, e := range errs {
					t.Errorf("%s %s → %d %.300s: %s", x.method, x.path, resp.StatusCode, raw, describe(e))
				}
			}
			template := usesTemplate(routeParam.ReplaceAllStringFunc(strings.SplitN(x.path, "?", 2)[0], func(s string) string {
				switch {
				case strings.HasPrefix(s, "/actions"):
					return "/actions/{actionId}"
				case strings.HasPrefix(s, "/users"):
					return "/users/{userId}"
				}
				return "/keys/{key}"
			}))
			seen[x.method+" "+template+" "+strconv.Itoa(resp.StatusCode)] = true
		}
		return bodies
	}

	env := testkit.NewEnv(t)
	later := `"activeAt":"` + time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339) + `","expiresAt":"` + time.Now().Add(48*time.Hour).UTC().Format(time.RFC3339) + `"`
	big := `{"userId":"u","kind":"` + strings.Repeat("x", 70<<10) + `"}`
	bigKey := `{"token":"` + strings.Repeat("a", 32) + `","response":"` + strings.Repeat("x", 70<<10) + `"}`
	run(env, []exchange{
		{method: "POST", path: "/actions", body: `{"actionId":"a1","userId":"u","kind":"coupon","metadata":{"c":"bf"}}`},
		{method: "POST", path: "/actions", body: `{"userId":"u","pin":"2468","payload":{"s":1}}`, headers: []string{"Idempotency-Key", "k1"}},
		{method: "POST", path: "/actions", body: `{"userId":"u","pin":"2468","payload":{"s":1}}`, headers: []string{"Idempotency-Key", "k1"}},
		{method: "POST", path: "/actions", body: `{"userId":"v"}`, headers: []string{"Idempotency-Key", "k1"}},
		{method: "POST", path: "/actions", body: `{"actionId":"a1","userId":"u"}`},
		{method: "POST", path: "/actions", body: `{"userId":"u","colour":"red"}`, badRequest: true},
		{method: "POST", path: "/actions", body: big, badRequest: true},
		{method: "GET", path: "/actions/a1"},
		{method: "GET", path: "/actions/nope"},
		{method: "GET", path: "/actions/bad%20id", badRequest: true},
		{method: "POST", path: "/actions/a1/consume", body: `{"reason":"checkout"}`, headers: []string{"Idempotency-Key", "c1"}},
		{method: "POST", path: "/actions/a1/consume", body: `{"reason":"checkout"}`, headers: []string{"Idempotency-Key", "c1"}},
		{method: "POST", path: "/actions/a1/consume", body: `{"reason":"other"}`, headers: []string{"Idempotency-Key", "c1"}},
		{method: "POST", path: "/actions/a1/consume"},
		{method: "POST", path: "/actions/nope/consume"},
		{method: "POST", path: "/actions", body: `{"actionId":"p1","userId":"u","pin":"2468","maxPinAttempts":1,"payload":[1,2]}`},
		{method: "POST", path: "/actions/p1/consume", body: `{"pin":"0000"}`},
		{method: "POST", path: "/actions/p1/consume", body: `{"pin":"2468"}`},
		{method: "POST", path: "/actions", body: `{"actionId":"p2","userId":"u","pin":"2468","payload":[1,2]}`},
		{method: "POST", path: "/actions/p2/consume", body: `{"pin":"2468"}`},
		{method: "POST", path: "/actions", body: `{"actionId":"l1","userId":"u",` + later + `}`},
		{method: "POST", path: "/actions/l1/consume"},
		{method: "POST", path: "/actions/l1/consume", body: `{"pin":7}`, badRequest: true},
		{method: "POST", path: "/actions/l1/consume", body: `{"reason":"` + strings.Repeat("x", 70<<10) + `"}`, badRequest: true},
		{method: "POST", path: "/actions", body: `{"actionId":"c1","userId":"u"}`},
		{method: "POST", path: "/actions/c1/cancel", body: `{"reason":"refund"}`, headers: []string{"Idempotency-Key", "x1"}},
		{method: "POST", path: "/actions/c1/cancel", body: `{"reason":"refund"}`, headers: []string{"Idempotency-Key", "x1"}},
		{method: "POST", path: "/actions/c1/cancel", body: `{"reason":"other"}`, headers: []string{"Idempotency-Key", "x1"}},
		{method: "POST", path: "/actions/c1/consume"},
		{method: "POST", path: "/actions/a1/cancel"},
		{method: "POST", path: "/actions/nope/cancel"},
		{method: "POST", path: "/actions/c1/cancel", body: `{"why":"x"}`, badRequest: true},
		{method: "POST", path: "/actions/c1/cancel", body: `{"reason":"` + strings.Repeat("x", 70<<10) + `"}`, badRequest: true},
		{method: "GET", path: "/actions/c1"},
		{method: "GET", path: "/actions/p1"},
	})
	// Expiry: the server's clock moves past l2's expiresAt.
	run(env, []exchange{{method: "POST", path: "/actions", body: `{"actionId":"l2","userId":"u","expiresAt":"` + soon() + `"}`}})
	env.Shift(48 * time.Hour)
	run(env, []exchange{
		{method: "POST", path: "/actions/l2/consume"},
		{method: "POST", path: "/actions/l2/cancel"},
	})
	env.Shift(0)

	claimed := run(env, []exchange{{method: "POST", path: "/keys/pay-1/claim", body: `{"fingerprint":"f","leaseSeconds":60}`}})
	token := field(claimed["POST /keys/pay-1/claim"], "token")
	run(env, []exchange{
		{method: "POST", path: "/keys/pay-1/claim", body: `{"fingerprint":"f"}`},
		{method: "POST", path: "/keys/pay-1/claim", body: `{"fingerprint":"g"}`},
		{method: "POST", path: "/keys/pay-1/claim", body: `{}`, badRequest: true},
		{method: "POST", path: "/keys/pay-1/claim", body: `{"fingerprint":"` + strings.Repeat("x", 70<<10) + `"}`, badRequest: true},
		{method: "GET", path: "/keys/pay-1"},
		{method: "GET", path: "/keys/none"},
		{method: "GET", path: "/keys/a%20b", badRequest: true},
		{method: "POST", path: "/keys/pay-1/complete", body: `{"token":"` + strings.Repeat("0", 32) + `","response":1}`},
		{method: "POST", path: "/keys/none/complete", body: `{"token":"` + strings.Repeat("0", 32) + `","response":1}`},
		{method: "POST", path: "/keys/pay-1/complete", body: `{"token":"x","response":1}`, badRequest: true},
		{method: "POST", path: "/keys/pay-1/complete", body: bigKey, badRequest: true},
		{method: "POST", path: "/keys/pay-1/complete", body: `{"token":"` + token + `","response":{"charge":"ch_1"}}`},
		{method: "POST", path: "/keys/pay-1/complete", body: `{"token":"` + token + `","response":{"charge":"ch_1"}}`},
		{method: "POST", path: "/keys/pay-1/claim", body: `{"fingerprint":"f"}`},
		{method: "POST", path: "/keys/pay-1/release", body: `{"token":"` + token + `"}`},
		{method: "POST", path: "/keys/none/release", body: `{"token":"` + token + `"}`},
		{method: "POST", path: "/keys/pay-1/release", body: `{"token":"` + token + `","colour":1}`, badRequest: true},
		{method: "POST", path: "/keys/pay-1/release", body: `{"token":"` + token + `","error":"` + strings.Repeat("x", 70<<10) + `"}`, badRequest: true},
	})
	second := run(env, []exchange{{method: "POST", path: "/keys/job/claim", body: `{"fingerprint":"f"}`, headers: []string{"Idempotency-Key", "i1"}}})
	jobToken := field(second["POST /keys/job/claim"], "token")
	run(env, []exchange{
		{method: "POST", path: "/keys/job/claim", body: `{"fingerprint":"f"}`, headers: []string{"Idempotency-Key", "i1"}},
		{method: "POST", path: "/keys/job/release", body: `{"token":"` + jobToken + `","error":"declined"}`},
		{method: "POST", path: "/keys/job/release", body: `{"token":"` + jobToken + `","error":"declined"}`},
		{method: "GET", path: "/keys/job"},
	})

	run(env, []exchange{
		{method: "POST", path: "/actions", body: `{"actionId":"s1","userId":"u-9","kind":"login"}`},
		{method: "POST", path: "/actions", body: `{"actionId":"s2","userId":"u-9","kind":"login","supersede":true}`},
		{method: "GET", path: "/users/u-9/actions?kind=login&state=active&limit=1"},
		{method: "GET", path: "/users/u-9/actions"},
		{method: "GET", path: "/users/u-9/actions?limit=500", badRequest: true},
		{method: "POST", path: "/users/u-9/actions/cancel", body: `{"kind":"login","reason":"sign out"}`, headers: []string{"Idempotency-Key", "so-1"}},
		{method: "POST", path: "/users/u-9/actions/cancel", body: `{"why":1}`, badRequest: true},
		{method: "POST", path: "/users/u-9/actions/cancel", body: `{"reason":"` + strings.Repeat("x", 70<<10) + `"}`, badRequest: true},
	})

	run(env, usesExchanges())
	// Outcomes added by issue 21 (item 16): a replayed create of a locked
	// PIN action (423), a cancel-all's key reused with another body (422).
	run(env, []exchange{
		{method: "POST", path: "/actions", body: `{"actionId":"lk","userId":"u","pin":"2468","maxPinAttempts":1}`, headers: []string{"Idempotency-Key", "lk-1"}},
		{method: "POST", path: "/actions/lk/consume", body: `{"pin":"0000"}`},
		{method: "POST", path: "/actions", body: `{"actionId":"lk","userId":"u","pin":"2468","maxPinAttempts":1}`, headers: []string{"Idempotency-Key", "lk-1"}},
		{method: "POST", path: "/users/u-9/actions/cancel", body: `{"kind":"coupon"}`, headers: []string{"Idempotency-Key", "so-1"}},
	})
	// A caller the tenant map does not place: 403 forbidden on every route.
	tenants := testkit.NewEnv(t, func(o *server.Options) { o.Tenants = `{"a":["svc-a"]}` })
	stranger := []string{"X-Exactonce-Caller", "arn:aws:iam::999999999999:user/mallory"}
	token0 := `{"token":"` + strings.Repeat("0", 32) + `"}`
	run(tenants, []exchange{
		{method: "POST", path: "/actions", body: `{"userId":"u"}`, headers: stranger},
		{method: "GET", path: "/actions/a1", headers: stranger},
		{method: "POST", path: "/actions/a1/consume", headers: stranger},
		{method: "POST", path: "/actions/a1/cancel", headers: stranger},
		{method: "GET", path: "/users/u/actions", headers: stranger},
		{method: "POST", path: "/users/u/actions/cancel", headers: stranger},
		{method: "POST", path: "/keys/k/claim", body: `{"fingerprint":"f"}`, headers: stranger},
		{method: "POST", path: "/keys/k/complete", body: `{"token":"` + strings.Repeat("0", 32) + `","response":1}`, headers: stranger},
		{method: "POST", path: "/keys/k/release", body: token0, headers: stranger},
		{method: "GET", path: "/keys/k", headers: stranger},
		{method: "GET", path: "/actions/a1/uses", headers: stranger},
		{method: "POST", path: "/actions/a1/uses/d1/release", headers: stranger},
	})

	dead := testkit.NewDeadEnv(t)
	run(dead, []exchange{
		{method: "GET", path: "/users/u/actions"},
		{method: "POST", path: "/users/u/actions/cancel"},
		{method: "POST", path: "/actions", body: `{"userId":"u"}`},
		{method: "GET", path: "/actions/a1"},
		{method: "POST", path: "/actions/a1/consume"},
		{method: "POST", path: "/actions/a1/cancel"},
		{method: "POST", path: "/keys/k/claim", body: `{"fingerprint":"f"}`},
		{method: "POST", path: "/keys/k/complete", body: `{"token":"` + strings.Repeat("0", 32) + `","response":1}`},
		{method: "POST", path: "/keys/k/release", body: `{"token":"` + strings.Repeat("0", 32) + `"}`},
		{method: "GET", path: "/keys/k"},
		{method: "GET", path: "/actions/a1/uses"},
		{method: "POST", path: "/actions/a1/uses/d1/release"},
	})

	// What any route can answer whatever it does (the shared request
	// handling: a bad request, a caller in no tenant or without the scope,
	// a dependency fault, a bug; and a body over the limit where there is
	// a body) must be documented on every route, driven above or not.
	for _, r := range routes {
		generic := []string{"400", "403", "500", "503"}
		if strings.HasPrefix(r, "POST ") {
			generic = append(generic, "413")
		}
		for _, code := range generic {
			if !docs[r+" "+code] {
				t.Errorf("%s can answer %s, which is not documented", r, code)
			}
		}
	}

	var missing []string
	for k := range docs {
		if !seen[k] && !strings.HasSuffix(k, " 500") {
			missing = append(missing, k)
		}
	}
	for k := range seen {
		if !docs[k] {
			t.Errorf("answered but not documented: %s", k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("documented but never answered by the test:\n%s", strings.Join(missing, "\n"))
	}
}

// TestServedDocument: the local server serves the document.
func TestServedDocument(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	resp, err := http.Get(env.URL + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Equal(b, api.OpenAPI) || !strings.Contains(resp.Header.Get("Content-Type"), "yaml") {
		t.Fatalf("GET /openapi.yaml: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// describe renders a validation error with its schema details.
func describe(e *vErrors.ValidationError) string {
	msg := e.Message + ": " + e.Reason
	for _, s := range e.SchemaValidationErrors {
		msg += "; " + s.FieldPath + " " + s.Reason
	}
	return msg
}

// soon is a time an hour ahead, RFC 3339 (whole seconds); the test then
// moves the server's clock past it. (A second ahead, truncated to whole
// seconds, could be in the past by the time a loaded machine sent it.)
func soon() string { return time.Now().Add(time.Hour).UTC().Format(time.RFC3339) }

// field reads a top-level string field of a JSON body.
func field(body, name string) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(body), &m)
	s, _ := m[name].(string)
	return s
}
