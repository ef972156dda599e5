package httpapi_test

// Rotating the server secret (docs/operating.md): functions on the old and
// the new secret share one table and lose nothing.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
)

// TestSecretRotation runs two API instances on one table, as two warm
// functions are during a rotation: "old" started on secret A, "new" on
// {current: B, previous: [A], ids: A}. Before the fix: one create key made
// two actions, the right PIN answered 403 on the old function, and a payload
// sealed under B was consumed by the old function and lost (500 forever).
func TestSecretRotation(t *testing.T) {
	t.Parallel()
	const (
		a = "rotation-secret-A-0123456789abcdefghijklmnop"
		b = "rotation-secret-B-0123456789abcdefghijklmnop"
	)
	var mu sync.Mutex
	oldSecret := a
	oldEnv := testkit.NewEnv(t, func(o *server.Options) {
		o.Secret = ""
		o.SecretSource = func(context.Context) (string, error) { mu.Lock(); defer mu.Unlock(); return oldSecret, nil }
	})
	setOld := func(s string) { mu.Lock(); oldSecret = s; mu.Unlock() }
	newSecret := `{"current":"` + b + `","previous":["` + a + `"],"ids":"` + a + `"}`
	newEnv := testkit.NewEnv(t, func(o *server.Options) {
		o.Secret = ""
		o.SecretSource = func(context.Context) (string, error) { mu.Lock(); defer mu.Unlock(); return newSecret, nil }
	})

	// 1. One create key, one action, whichever function answers.
	c1 := do(t, oldEnv, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", "rot-1")
	c2 := do(t, newEnv, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", "rot-1")
	if c1.Status != 201 || c2.Status != 201 || c2.Str("actionId") != c1.Str("actionId") || c2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("one key, two functions: %s / %s", c1.Raw, c2.Raw)
	}

	// 2. PIN and payload under B; the old function does not know B and
	// cannot learn it yet: 503, and nothing written (no guess counted, not consumed).
	do(t, newEnv, "POST", "/actions", `{"actionId":"rb","userId":"u","pin":"2468","maxPinAttempts":1,"payload":{"code":"B-sealed"}}`)
	oldEnv.Counter.Take()
	r := do(t, oldEnv, "POST", "/actions/rb/consume", `{"pin":"2468"}`)
	expect(t, oldEnv, r, 503, "unavailable", update)
	g := do(t, oldEnv, "GET", "/actions/rb", "")
	if g.Str("state") != "active" || g.Body["pinAttemptsRemaining"] != 1.0 {
		t.Fatalf("after the refused consume: %s", g.Raw)
	}
	do(t, newEnv, "POST", "/actions", `{"actionId":"rp","userId":"u","payload":{"code":"B-sealed"}}`)
	r = do(t, oldEnv, "POST", "/actions/rp/consume", ``)
	if g := do(t, oldEnv, "GET", "/actions/rp", ""); r.Status != 503 || g.Str("state") != "active" {
		t.Fatalf("a consume must not commit what it cannot open: %d %s; then %s", r.Status, r.Raw, g.Raw)
	}
	t.Logf("rotation: consume on a function whose secret lacks the item's key: %d %s", r.Status, r.Str("error"))

	// 3. Step one of the procedure reaches the old function's secret: it
	// learns B at the first item that needs it (one reload), and the right
	// PIN works there.
	setOld(`{"current":"` + a + `","previous":["` + b + `"],"ids":"` + a + `"}`)
	time.Sleep(1100 * time.Millisecond) // the reload's MinGap since step 2's
	ok := do(t, oldEnv, "POST", "/actions/rb/consume", `{"pin":"2468"}`)
	if ok.Status != 200 || !strings.Contains(ok.Raw, `"payload":{"code":"B-sealed"}`) {
		t.Fatalf("old function after learning B: %d %s", ok.Status, ok.Raw)
	}

	// 4. Sealed under A, then A retired on both: refused without loss (503,
	// still open), and consumable again when A is back.
	do(t, oldEnv, "POST", "/actions", `{"actionId":"ra","userId":"u","payload":{"code":"A-sealed"}}`)
	mu.Lock()
	newSecret = `{"current":"` + b + `","ids":"` + a + `"}`
	mu.Unlock()
	newEnv2 := testkit.NewEnv(t, func(o *server.Options) { // a cold start on the retired set
		o.Secret = ""
		o.SecretSource = func(context.Context) (string, error) { mu.Lock(); defer mu.Unlock(); return newSecret, nil }
	})
	if r := do(t, newEnv2, "POST", "/actions/ra/consume", ``); r.Status != 503 {
		t.Fatalf("payload under a retired secret: %d %s", r.Status, r.Raw)
	}
	if g := do(t, newEnv2, "GET", "/actions/ra", ""); g.Str("state") != "active" {
		t.Fatalf("the refused consume wrote: %s", g.Raw)
	}
	// Ids stay put across the rotation: a key names the same action on a
	// function that knows only B as on one that started on A.
	c3 := do(t, newEnv2, "POST", "/actions", `{"userId":"u","kind":"x"}`, "Idempotency-Key", "rot-2")
	c4 := do(t, oldEnv, "POST", "/actions", `{"userId":"u","kind":"x"}`, "Idempotency-Key", "rot-2")
	if c3.Status != 201 || c4.Str("actionId") != c3.Str("actionId") {
		t.Fatalf("after retiring A: %s / %s", c3.Raw, c4.Raw)
	}
	mu.Lock()
	newSecret = `{"current":"` + b + `","previous":["` + a + `"],"ids":"` + a + `"}`
	mu.Unlock()
	time.Sleep(1100 * time.Millisecond)
	if r := do(t, newEnv2, "POST", "/actions/ra/consume", ``); r.Status != 200 || !strings.Contains(r.Raw, "A-sealed") {
		t.Fatalf("with A back: %d %s", r.Status, r.Raw)
	}
}

// TestRightPINKeyedRetryOnRetiredSecretIs503: docs/operating.md, rotation:
// "Retiring too early loses nothing, but consumes of such actions answer
// 503 until A is back", and a function "never writes what it cannot
// verify". A keyed consume with the RIGHT PIN whose reservation committed
// but whose consume write failed (503, retry with the key) is retried on a
// function where A is retired: it answers 503 and spends no guess, whether
// its fingerprint was taken under B or under A. Before the fix:
//   - fingerprint taken under B (the first attempt ran on step 2): the retry
//     reached the PIN comparison, PINMatches knew no set A and said false: the right
//     PIN was answered 403 invalid_pin;
//   - fingerprint taken under A (first attempt before the promotion): the
//     stored fingerprint was unknown, so the retry was judged "same key,
//     other body": a PIN guess was spent (a write) and the answer was 422.
func TestRightPINKeyedRetryOnRetiredSecretIs503(t *testing.T) {
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

// TestHostedKeysAcrossRotation: a key's token and sealed response work on
// both functions of a rotation. The token is checked under the ids secret
// (pinned), so a holder completes on either function; a response sealed
// under the new secret replays on the old function once it learns it (503
// before, nothing lost), and one sealed under the old secret replays on the
// new function.
func TestHostedKeysAcrossRotation(t *testing.T) {
	t.Parallel()
	oldEnv, newEnv, setOld := rotationPair(t)

	toNew := claim(t, oldEnv, "k-new", `{"fingerprint":"f"}`)
	if r := do(t, newEnv, "POST", "/keys/k-new/complete", `{"token":"`+toNew.Str("token")+`","response":{"sealed":"B"}}`); r.Status != 200 {
		t.Fatalf("a token from the old function, completed on the new: %s", r.Raw)
	}
	if r := claim(t, oldEnv, "k-new", `{"fingerprint":"f"}`); r.Status != 503 {
		t.Fatalf("the old function replayed what it cannot open: %d %s", r.Status, r.Raw)
	}
	setOld(`{"current":"` + rotA + `","previous":["` + rotB + `"],"ids":"` + rotA + `"}`)
	time.Sleep(1100 * time.Millisecond) // the reload's MinGap since the 503's
	if r := claim(t, oldEnv, "k-new", `{"fingerprint":"f"}`); r.Status != 200 || !strings.Contains(r.Raw, `"response":{"sealed":"B"}`) {
		t.Fatalf("the old function after learning B: %d %s", r.Status, r.Raw)
	}

	toOld := claim(t, newEnv, "k-old", `{"fingerprint":"f"}`)
	if r := do(t, oldEnv, "POST", "/keys/k-old/complete", `{"token":"`+toOld.Str("token")+`","response":{"sealed":"A"}}`); r.Status != 200 {
		t.Fatalf("a token from the new function, completed on the old: %s", r.Raw)
	}
	if r := claim(t, newEnv, "k-old", `{"fingerprint":"f"}`); r.Status != 200 || !strings.Contains(r.Raw, `"response":{"sealed":"A"}`) {
		t.Fatalf("a response sealed under A, replayed by the new function: %d %s", r.Status, r.Raw)
	}
}
