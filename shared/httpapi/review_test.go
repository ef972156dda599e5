package httpapi_test

// Reproductions from an adversarial review: each test failed on the code as
// reviewed (the comment says how) and states the promise (docs/) it holds
// the code to; each passes since its fix.

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
)

// TestReviewCancelAllKeyReusedWithOtherBody: "Same key + other body is 422"
// holds for every POST (docs/http-api.md, Idempotency-Key). A cancel-all re-sent with
// its key but another kind is not a retry: it must be refused 422 and cancel
// nothing. Instead it cancels the other kind's actions and answers 200.
func TestReviewCancelAllKeyReusedWithOtherBody(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"l1","userId":"u","kind":"login"}`)
	create(t, env, `{"actionId":"c1","userId":"u","kind":"coupon"}`)
	first := do(t, env, "POST", "/users/u/actions/cancel", `{"kind":"login"}`, "Idempotency-Key", "signout-1")
	if first.Status != 200 || first.Body["canceled"] != 1.0 {
		t.Fatalf("first cancel-all: %s", first.Raw)
	}
	r := do(t, env, "POST", "/users/u/actions/cancel", `{"kind":"coupon"}`, "Idempotency-Key", "signout-1")
	g := do(t, env, "GET", "/actions/c1", "")
	if r.Status != 422 || r.Str("error") != "idempotency_key_reused" || g.Str("canceledAt") != "" {
		t.Fatalf("same key, other body: %d %s; c1 afterwards: %s", r.Status, r.Raw, g.Raw)
	}
}

// TestReviewCancelAllListsWhatItDidNotCancel: the cancel-all answer is
// "what this call canceled". An action canceled by a single-action cancel
// that happened to carry the same key and body ({} here) is listed by the
// cancel-all, which canceled nothing.
func TestReviewCancelAllListsWhatItDidNotCancel(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"x1","userId":"u"}`)
	if r := do(t, env, "POST", "/actions/x1/cancel", `{"reason":"r"}`, "Idempotency-Key", "k-7"); r.Status != 200 {
		t.Fatalf("single cancel: %s", r.Raw)
	}
	r := do(t, env, "POST", "/users/u/actions/cancel", `{"reason":"r"}`, "Idempotency-Key", "k-7")
	if r.Status == 200 && r.Body["canceled"] != 0.0 {
		t.Fatalf("cancel-all canceled nothing but answers %s", r.Raw)
	}
}

// TestReviewSupersedeWithoutKindCancelsOtherKinds: supersede cancels "the
// user's open actions of the same kind". A superseding create without a
// kind cancels the user's actions of every kind (CancelAll's Kind "" means
// "any"), while its pointer item only covers kind "".
func TestReviewSupersedeWithoutKindCancelsOtherKinds(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"login-a","userId":"u","kind":"login"}`)
	create(t, env, `{"actionId":"plain-b","userId":"u","supersede":true}`)
	if g := do(t, env, "GET", "/actions/login-a", ""); g.Str("state") != "active" {
		t.Fatalf("a kind-less superseding create canceled a login action: %s", g.Raw)
	}
}

// TestReviewDerivedIDNotTenantBound: "PINs and payloads are bound to the
// item key too" and derived ids are "unguessable" — but an id derived from
// an Idempotency-Key is the same in every tenant: a tenant that guesses or
// observes another tenant's key (order numbers, "order-77") learns that
// tenant's action id, which magic links use as their secret part.
func TestReviewDerivedIDNotTenantBound(t *testing.T) {
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

// TestReviewRetiredKeyKeyedRetryOfRightPIN: docs/operating.md, rotation: "Retiring too
// early loses nothing, but consumes of such actions answer 503 until A is
// back", and a function "never writes what it cannot verify". A keyed
// consume with the RIGHT PIN whose reservation committed but whose consume
// write failed (503, retry with the key) is retried on a function where A
// is retired:
//   - fingerprint taken under B (the first attempt ran on step 2): the retry
//     reaches judgeGuess, PINMatches knows no set A and says false: the right
//     PIN is answered 403 invalid_pin;
//   - fingerprint taken under A (first attempt before the promotion): the
//     stored fingerprint is unknown, so the retry is judged "same key, other
//     body": a PIN guess is spent (a write) and the answer is 422.
func TestReviewRetiredKeyKeyedRetryOfRightPIN(t *testing.T) {
	t.Parallel()
	const (
		a = "rotation-secret-A-0123456789abcdefghijklmnop"
		b = "rotation-secret-B-0123456789abcdefghijklmnop"
	)
	step2 := `{"current":"` + b + `","previous":["` + a + `"],"ids":"` + a + `"}`
	retired := `{"current":"` + b + `","ids":"` + a + `"}`
	p, err := faults.Start(testkit.DynamoDB(t), faults.Rates{}, 1, "UpdateItem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	onA := testkit.NewEnv(t, func(o *server.Options) { o.Secret = a })
	onAProxied := testkit.NewEnv(t, func(o *server.Options) { o.Secret = a; o.AWS.BaseEndpoint = aws.String(p.URL) })
	onStep2Proxied := testkit.NewEnv(t, func(o *server.Options) { o.Secret = step2; o.AWS.BaseEndpoint = aws.String(p.URL) })
	onRetired := testkit.NewEnv(t, func(o *server.Options) { o.Secret = retired })

	// reserveOnly runs a keyed right-PIN consume whose reservation commits
	// and whose consume write fails (DynamoDB 500s, not applied): 503.
	reserveOnly := func(env *testkit.Env, id, key string) {
		p.PassThenDrop(1, 0)
		p.SetRates(faults.Rates{ServerError: 1})
		r := do(t, env, "POST", "/actions/"+id+"/consume", `{"pin":"2468"}`, "Idempotency-Key", key)
		p.SetRates(faults.Rates{})
		if r.Status != 503 {
			t.Fatalf("%s: want the consume write to fail: %d %s", id, r.Status, r.Raw)
		}
		if _, ok := rawItem(t, env, id)["consumedAt"]; ok {
			t.Fatalf("%s: consumed", id)
		}
	}
	for _, id := range []string{"fp-b", "fp-a"} {
		create(t, onA, `{"actionId":"`+id+`","userId":"u","pin":"2468","maxPinAttempts":3,"payload":"p"}`)
	}
	reserveOnly(onStep2Proxied, "fp-b", "k-b")
	reserveOnly(onAProxied, "fp-a", "k-a")

	var failures []string
	before := rawItem(t, onA, "fp-a")["pinFailures"].(*types.AttributeValueMemberN).Value
	if r := do(t, onRetired, "POST", "/actions/fp-b/consume", `{"pin":"2468"}`, "Idempotency-Key", "k-b"); r.Status != 503 {
		failures = append(failures, "right PIN, keyed retry (fingerprint under B), A retired: "+r.Raw)
	}
	r := do(t, onRetired, "POST", "/actions/fp-a/consume", `{"pin":"2468"}`, "Idempotency-Key", "k-a")
	after := rawItem(t, onA, "fp-a")["pinFailures"].(*types.AttributeValueMemberN).Value
	if r.Status != 503 || after != before {
		failures = append(failures, "right PIN, keyed retry (fingerprint under A), A retired: "+r.Raw+" pinFailures "+before+" -> "+after)
	}
	if len(failures) > 0 {
		t.Fatal(strings.Join(failures, "\n"))
	}
}

// TestCancelAllKeyedResend (issue 21, item 11): a keyed cancel-all re-sent
// with its key and body says it is a replay (Idempotent-Replayed: true),
// whether the first call canceled something or nothing; the same key with
// another body is 422 even when the first call canceled nothing, and then
// cancels nothing. Each keyed call costs one conditional write more than an
// unkeyed one (the call's record), and nothing else.
func TestCancelAllKeyedResend(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"cr-l1","userId":"cr","kind":"login"}`)
	first := do(t, env, "POST", "/users/cr/actions/cancel", `{"kind":"login"}`, "Idempotency-Key", "cr-1")
	if first.Status != 200 || first.Body["canceled"] != 1.0 || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first cancel-all: %d %v %s", first.Status, first.Header, first.Raw)
	}
	again := do(t, env, "POST", "/users/cr/actions/cancel", `{"kind":"login"}`, "Idempotency-Key", "cr-1")
	if again.Status != 200 || again.Raw != first.Raw || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("re-sent cancel-all: %d %v %s, first %s", again.Status, again.Header, again.Raw, first.Raw)
	}

	// A first call that canceled nothing.
	none := do(t, env, "POST", "/users/cr/actions/cancel", `{"kind":"coupon"}`, "Idempotency-Key", "cr-2")
	if none.Status != 200 || none.Body["canceled"] != 0.0 || none.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("cancel-all of nothing: %d %v %s", none.Status, none.Header, none.Raw)
	}
	env.Counter.Take()
	noneAgain := do(t, env, "POST", "/users/cr/actions/cancel", `{"kind":"coupon"}`, "Idempotency-Key", "cr-2")
	if noneAgain.Status != 200 || noneAgain.Body["canceled"] != 0.0 || noneAgain.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("re-sent cancel-all of nothing: %d %v %s", noneAgain.Status, noneAgain.Header, noneAgain.Raw)
	}
	t.Logf("keyed cancel-all re-sent (nothing to cancel): %v", env.Counter.Take())
	create(t, env, `{"actionId":"cr-t1","userId":"cr","kind":"transfer"}`)
	reused := do(t, env, "POST", "/users/cr/actions/cancel", `{"kind":"transfer"}`, "Idempotency-Key", "cr-2")
	g := do(t, env, "GET", "/actions/cr-t1", "")
	if reused.Status != 422 || reused.Str("error") != "idempotency_key_reused" || g.Str("canceledAt") != "" {
		t.Fatalf("same key, other body, after a call that canceled nothing: %d %s; cr-t1 afterwards: %s", reused.Status, reused.Raw, g.Raw)
	}
	if other := do(t, env, "POST", "/users/cr-other/actions/cancel", `{"kind":"coupon"}`, "Idempotency-Key", "cr-2"); other.Status != 422 {
		t.Fatalf("same key, another user: %d %s", other.Status, other.Raw)
	}
}
