package gateway

import (
	"net/http/httptest"
	"slices"
	"testing"
)

// TestCookiesArriveAsSent: payload 2.0 moves the Cookie header into
// cookies, one entry per cookie of every Cookie line, as the client sent it
// (API Gateway does not parse cookie values). Locally net/http parsed them
// first: a quoted value lost its quotes (sid="a b" arrived as sid=a b) and a
// cookie net/http judges invalid was dropped, so a function reading cookies
// saw here what it never sees in AWS.
func TestCookiesArriveAsSent(t *testing.T) {
	r := httptest.NewRequest("GET", "/actions/x", nil)
	r.Header.Add("Cookie", `sid="a b"; theme=dark`)
	r.Header.Add("Cookie", `a@b=1;last=2`)
	ev, err := Event(r, "GET /actions/{actionId}")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`sid="a b"`, "theme=dark", "a@b=1", "last=2"}
	if !slices.Equal(ev.Cookies, want) {
		t.Errorf("cookies %q, want %q", ev.Cookies, want)
	}
}
