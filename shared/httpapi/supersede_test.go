package httpapi_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/shared/httpapi"
)

// createOn sends a create straight to one API instance (its own clock).
func createOn(t *testing.T, api *httpapi.API, body, key string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	r, err := api.Create(context.Background(), events.APIGatewayV2HTTPRequest{
		RouteKey: httpapi.RouteCreate, Body: body, Headers: map[string]string{"idempotency-key": key},
	})
	if err != nil || r.StatusCode != 201 {
		t.Fatalf("create on an instance: %d %s %v", r.StatusCode, r.Body, err)
	}
	return r
}

// TestSupersedeSkewedClocks (issue 21, item 18): two instances whose clocks
// differ by 50 ms. A link created on the instance that is ahead, answered,
// and then a new link created on the other: the second is the newer one
// (it was sent after the first was answered) although its createdAt is the
// earlier, so the first is the one superseded. Re-sending the first
// create changes nothing; of concurrent superseding creates on both
// instances exactly one stays open.
func TestSupersedeSkewedClocks(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	t0 := time.Now()
	ahead, behind := *env.API, *env.API
	ahead.Now = func() time.Time { return t0.Add(50 * time.Millisecond) }
	behind.Now = func() time.Time { return t0.Add(10 * time.Millisecond) } // 10 ms later, on a clock 50 ms behind
	first := `{"actionId":"sk-1","userId":"sk","kind":"login","supersede":true}`
	createOn(t, &ahead, first, "sk-1")
	createOn(t, &behind, `{"actionId":"sk-2","userId":"sk","kind":"login","supersede":true}`, "sk-2")
	state := func(id string) string {
		g := do(t, env, "GET", "/actions/"+id, "")
		return g.Str("state") + "/" + g.Str("cancelReason")
	}
	if s1, s2 := state("sk-1"), state("sk-2"); s1 != "expired/superseded" || s2 != "active/" {
		t.Fatalf("the older link %s, the newer %s; want the older superseded and the newer open", s1, s2)
	}
	for _, api := range []*httpapi.API{&ahead, &behind} {
		if r := createOn(t, api, first, "sk-1"); r.Headers[httpapi.HeaderReplayed] != "true" {
			t.Fatalf("re-sent create: %v %s", r.Headers, r.Body)
		}
	}
	if s1, s2 := state("sk-1"), state("sk-2"); s1 != "expired/superseded" || s2 != "active/" {
		t.Fatalf("after the older create was re-sent: %s, %s", s1, s2)
	}

	// Concurrent superseding creates over both instances, clocks 50 ms apart.
	for round := range 5 {
		user := fmt.Sprintf("skc%d", round)
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				api := &ahead
				if g%2 == 1 {
					api = &behind
				}
				createOn(t, api, fmt.Sprintf(`{"actionId":"%s-%d","userId":"%s","kind":"login","supersede":true}`, user, g, user), fmt.Sprintf("%s-%d", user, g))
			})
		}
		wg.Wait()
		open := 0
		for g := range 6 {
			if do(t, env, "GET", fmt.Sprintf("/actions/%s-%d", user, g), "").Str("state") == "active" {
				open++
			}
		}
		if open != 1 {
			t.Fatalf("round %d: %d of 6 concurrent superseding creates stayed open, want exactly 1", round, open)
		}
	}
}

// TestSupersedeWithoutKindKeepsOtherKinds: supersede cancels "the user's
// open actions of the same kind". A superseding create without a kind
// leaves the user's actions of other kinds open. Before the fix it canceled
// the user's actions of every kind (CancelAll's Kind "" means "any"), while
// its pointer item only covers kind "".
func TestSupersedeWithoutKindKeepsOtherKinds(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"login-a","userId":"u","kind":"login"}`)
	create(t, env, `{"actionId":"plain-b","userId":"u","supersede":true}`)
	if g := do(t, env, "GET", "/actions/login-a", ""); g.Str("state") != "active" {
		t.Fatalf("a kind-less superseding create canceled a login action: %s", g.Raw)
	}
}

// TestSupersedeRetryCancelsWhatItReplaced: two superseding creates within
// MaxClockSkew, the newer (a, sent after b was answered) stamped 40 ms
// before b by its instance's clock. a's pointer write moves the pointer
// from b; the cancel of b that follows fails (DynamoDB unreachable for that
// one write), so a's create answers 503 and the client re-sends it. The
// pointer remembers whom a's write replaced (prevKey), so the re-send
// cancels b: one open superseding action per user and kind. Before the fix
// the re-send found the pointer already a's (nothing to cancel) and its
// cancel-all read only actions created at or before a, so b stayed open
// for good.
func TestSupersedeRetryCancelsWhatItReplaced(t *testing.T) {
	t.Parallel()
	var last, armed atomic.Int32
	var proxy *faults.Proxy
	env, proxy := hooked(t, func(n int32) {
		last.Store(n)
		if a := armed.Load(); a != 0 {
			proxy.Down(n >= a) // the armed write and its SDK retries fail
		}
	})
	t0 := time.Now()
	ahead, behind := *env.API, *env.API
	ahead.Now = func() time.Time { return t0.Add(50 * time.Millisecond) }
	behind.Now = func() time.Time { return t0.Add(10 * time.Millisecond) }
	createOn(t, &ahead, `{"actionId":"sc-b","userId":"sc","kind":"login","supersede":true}`, "sc-b")
	armed.Store(last.Load() + 3) // a's create, a's pointer write, then the cancel of b
	body := `{"actionId":"sc-a","userId":"sc","kind":"login","supersede":true}`
	r, _ := behind.Create(context.Background(), events.APIGatewayV2HTTPRequest{
		RouteKey: httpapi.RouteCreate, Body: body, Headers: map[string]string{"idempotency-key": "sc-a"}})
	armed.Store(0)
	proxy.Down(false)
	// A dependency fault is a 503 the caller retries with its key (DynamoDB's
	// 503 ServiceUnavailableException was a 500 internal before).
	if r.StatusCode != 503 {
		t.Errorf("a's first create answered %d %s, want 503", r.StatusCode, r.Body)
	}
	createOn(t, &behind, body, "sc-a") // the client's re-send
	sa, sb := do(t, env, "GET", "/actions/sc-a", ""), do(t, env, "GET", "/actions/sc-b", "")
	if sa.Str("state") == "active" && sb.Str("state") == "active" {
		t.Fatalf("both superseding actions open after a's re-sent create: a %s; b %s", sa.Raw, sb.Raw)
	}
}
