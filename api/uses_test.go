package api_test

import (
	"regexp"
	"strings"
	"time"
)

// usesExchanges drive the routes and outcomes of multi-use actions through
// TestResponsesMatchTheDocument.
func usesExchanges() []exchange {
	later := `"activeAt":"` + time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339) + `"`
	return []exchange{
		{method: "POST", path: "/actions", body: `{"actionId":"m1","userId":"u","maxUses":2,"releasable":true,"payload":{"k":1}}`},
		{method: "POST", path: "/actions", body: `{"actionId":"m2","userId":"u","maxUses":2}`},
		{method: "POST", path: "/actions", body: `{"actionId":"m3","userId":"u","maxUses":2,"releasable":true,` + later + `}`},
		{method: "POST", path: "/actions", body: `{"userId":"u","maxUses":2,"pin":"2468"}`, badRequest: true},
		{method: "POST", path: "/actions/m1/consume", body: `{"useId":"d1"}`, headers: []string{"Idempotency-Key", "u1"}},
		{method: "POST", path: "/actions/m1/consume", body: `{"useId":"d1"}`, headers: []string{"Idempotency-Key", "u1"}},
		{method: "POST", path: "/actions/m1/consume", body: `{"useId":"d9"}`, headers: []string{"Idempotency-Key", "u1"}},
		{method: "POST", path: "/actions/m1/consume", body: `{"useId":"d2"}`},
		{method: "POST", path: "/actions/m1/consume", body: `{"useId":"d3"}`},
		{method: "POST", path: "/actions/m1/consume", body: `{}`, badRequest: true},
		{method: "POST", path: "/actions/m3/consume", body: `{"useId":"d1"}`},
		{method: "GET", path: "/actions/m1"},
		{method: "GET", path: "/actions/m1/uses?limit=1"},
		{method: "GET", path: "/actions/m1/uses?cursor=MC5kMQ"}, // gate 0, after useId d1: the shape a page's cursor has
		{method: "GET", path: "/actions/m1/uses?cursor=d1", badRequest: true},
		{method: "GET", path: "/actions/nope/uses"},
		{method: "GET", path: "/actions/m1/uses?limit=0", badRequest: true},
		{method: "POST", path: "/actions/m1/uses/d1/release", headers: []string{"Idempotency-Key", "r1"}},
		{method: "POST", path: "/actions/m1/uses/d1/release", headers: []string{"Idempotency-Key", "r1"}},
		// the release's key on another use: 422 idempotency_key_reused
		{method: "POST", path: "/actions/m1/uses/d2/release", headers: []string{"Idempotency-Key", "r1"}},
		{method: "POST", path: "/actions/m1/uses/d1/release", body: `{"why":1}`, badRequest: true},
		{method: "POST", path: "/actions/m1/uses/d1/release", body: `{"` + strings.Repeat("x", 70<<10) + `":1}`, badRequest: true},
		{method: "POST", path: "/actions/m1/uses/nobody/release"},
		{method: "POST", path: "/actions/nope/uses/d1/release"},
		{method: "POST", path: "/actions/m2/uses/d1/release"},
		{method: "POST", path: "/actions/m1/cancel"},
		{method: "POST", path: "/actions/m1/uses/d2/release"},
	}
}

// useParam is the useId segment of a uses route.
var useParam = regexp.MustCompile(`^(/actions/\{actionId\}/uses)/[^/]+/release$`)

// usesTemplate turns the useId of a release path into its template.
func usesTemplate(path string) string { return useParam.ReplaceAllString(path, "$1/{useId}/release") }
