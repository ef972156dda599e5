package httpapi_test

import (
	"strings"
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestLocalServerRefusesCrossSite: a web page the developer has open can
// POST to the local server without a preflight; what a browser marks as
// cross-site is refused, what curl sends passes.
func TestLocalServerRefusesCrossSite(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	host := strings.TrimPrefix(env.URL, "http://")
	for _, tc := range []struct {
		headers []string
		status  int
	}{
		{[]string{"Sec-Fetch-Site", "cross-site"}, 403},
		{[]string{"Origin", "https://evil.example"}, 403},
		{[]string{"Origin", "null"}, 403},
		{[]string{"Origin", "http://localhost:3000"}, 403},
		{[]string{"Origin", "http://" + host, "Sec-Fetch-Site", "same-origin"}, 201},
		{nil, 201},
	} {
		r := do(t, env, "POST", "/actions", `{"userId":"u"}`, tc.headers...)
		if r.Status != tc.status {
			t.Errorf("%v: %d %s, want %d", tc.headers, r.Status, r.Raw, tc.status)
		}
	}
	if n := env.Counter.Take()["UpdateItem"]; n != 2 {
		t.Fatalf("%d writes, want 2 (refused requests write nothing)", n)
	}
}
