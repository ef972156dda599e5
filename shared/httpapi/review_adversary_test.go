package httpapi_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/shared/httpapi"
)

// TestReviewKeyedReleaseRetryFreesALaterTake: a keyed release whose answer
// was lost is re-sent (same Idempotency-Key, same body) after the useId took
// its use again. The re-send must replay the first release; instead the
// release's condition never looks at the key (a take's does, useKey:), so
// the re-send frees the new use: one keyed call, two releases.
func TestReviewKeyedReleaseRetryFreesALaterTake(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"rk","userId":"u","maxUses":2,"releasable":true}`)
	if r := do(t, env, "POST", "/actions/rk/consume", `{"useId":"dev"}`); r.Status != 200 {
		t.Fatalf("take: %d %s", r.Status, r.Raw)
	}
	first := do(t, env, "POST", "/actions/rk/uses/dev/release", ``, "Idempotency-Key", "deactivate-1")
	if first.Status != 200 {
		t.Fatalf("release: %d %s", first.Status, first.Raw)
	}
	if r := do(t, env, "POST", "/actions/rk/consume", `{"useId":"dev"}`); r.Status != 200 || do(t, env, "GET", "/actions/rk", "").Body["usesHeld"] != 1.0 {
		t.Fatalf("take again: %d %s", r.Status, r.Raw)
	}
	resent := do(t, env, "POST", "/actions/rk/uses/dev/release", ``, "Idempotency-Key", "deactivate-1")
	g := do(t, env, "GET", "/actions/rk", "")
	if resent.Header.Get("Idempotent-Replayed") != "true" || g.Body["usesHeld"] != 1.0 {
		t.Fatalf("re-sent keyed release freed the later take: replayed=%q usesHeld=%v; first %s; re-send %s",
			resent.Header.Get("Idempotent-Replayed"), g.Body["usesHeld"], first.Raw, resent.Raw)
	}
}

// TestReviewSupersedeCancelLostStaysOpen: two superseding creates within
// MaxClockSkew, the newer (a, sent after b was answered) stamped 40 ms
// before b by its instance's clock. a's pointer write moves the pointer
// from b; the cancel of b that follows fails (DynamoDB unreachable for that
// one write), so a's create answers an error and the client re-sends it.
// The re-send found the pointer already a's (nothing to cancel) and its
// cancel-all reads only actions created at or before a, so b was never
// canceled: two open superseding actions of one user and kind for good.
// Now the pointer remembers whom a's write replaced (prevKey), and the
// re-send cancels it.
func TestReviewSupersedeCancelLostStaysOpen(t *testing.T) {
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
