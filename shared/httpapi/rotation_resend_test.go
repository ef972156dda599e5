package httpapi_test

// The secret rotating, retired or unreachable between two calls of one
// logical operation.

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/server"
)

const (
	rotA = "rotation-secret-A-0123456789abcdefghijklmnop"
	rotB = "rotation-secret-B-0123456789abcdefghijklmnop"
)

// rotationPair: "old" started on A alone (its source can be moved on), "new"
// on {current B, previous A, ids A}: two warm functions of one table while a
// rotation reaches them one after the other.
func rotationPair(t *testing.T) (oldEnv, newEnv *testkit.Env, setOld func(string)) {
	t.Helper()
	var mu sync.Mutex
	oldSecret := rotA
	oldEnv = testkit.NewEnv(t, func(o *server.Options) {
		o.Secret = ""
		o.SecretSource = func(context.Context) (string, error) { mu.Lock(); defer mu.Unlock(); return oldSecret, nil }
	})
	newEnv = testkit.NewEnv(t, func(o *server.Options) {
		o.Secret = ""
		o.SecretSource = func(context.Context) (string, error) {
			return `{"current":"` + rotB + `","previous":["` + rotA + `"],"ids":"` + rotA + `"}`, nil
		}
	})
	return oldEnv, newEnv, func(s string) { mu.Lock(); oldSecret = s; mu.Unlock() }
}

// TestKeyedResendsAcrossRotation: a keyed call answered on the function
// rotated first (its fingerprint under B), its answer lost, re-sent to a
// function whose secret already lists B but which has not re-read it yet
// (step 1 reached its source; its 5-minute refresh has not run). The
// docs: a function that meets a key id it does not know, on any route,
// re-reads the secret and runs the request once more; it never judges
// against what it cannot verify. So the re-send is the same call: the first
// answer again, as for create, consume and cancel. Before the fix a keyed
// cancel-all re-sent so answered 422 idempotency_key_reused, and a keyed
// claim 409 in_progress (its own lease).
func TestKeyedResendsAcrossRotation(t *testing.T) {
	t.Parallel()
	oldEnv, newEnv, setOld := rotationPair(t)
	setOld(`{"current":"` + rotA + `","previous":["` + rotB + `"],"ids":"` + rotA + `"}`) // step 1 reached the source

	var failures []string
	// Hosted key: claimed with a key on the new function, the claim re-sent
	// to the old: its own claim, so 201 with the same token.
	c1 := claim(t, newEnv, "hk", `{"fingerprint":"f"}`, "Idempotency-Key", "kc-1")
	if c1.Status != 201 {
		t.Fatalf("claim: %s", c1.Raw)
	}
	time.Sleep(1100 * time.Millisecond)
	c2 := claim(t, oldEnv, "hk", `{"fingerprint":"f"}`, "Idempotency-Key", "kc-1")
	if c2.Status != 201 || c2.Str("token") != c1.Str("token") {
		failures = append(failures, "keyed claim re-sent to the function that has not re-read the secret: "+c2.Raw+" (first: "+c1.Raw+")")
	}
	// Cancel-all: recorded on the new function, re-sent to the old.
	create(t, newEnv, `{"actionId":"ca1","userId":"cu","kind":"z"}`)
	first := do(t, newEnv, "POST", "/users/cu/actions/cancel", `{"kind":"z"}`, "Idempotency-Key", "ca-1")
	if first.Status != 200 {
		t.Fatalf("cancel-all: %s", first.Raw)
	}
	time.Sleep(1100 * time.Millisecond)
	again := do(t, oldEnv, "POST", "/users/cu/actions/cancel", `{"kind":"z"}`, "Idempotency-Key", "ca-1")
	if again.Status != 200 || again.Header.Get("Idempotent-Replayed") != "true" {
		failures = append(failures, "cancel-all re-sent to the function that has not re-read the secret: "+again.Raw+" (first: "+first.Raw+")")
	}

	// Reference (last: it makes the old function learn B): the action routes do learn B from the stored fingerprint.
	create(t, newEnv, `{"actionId":"x1","userId":"u"}`)
	first = do(t, newEnv, "POST", "/actions/x1/cancel", `{"reason":"r"}`, "Idempotency-Key", "can-1")
	time.Sleep(1100 * time.Millisecond)
	again = do(t, oldEnv, "POST", "/actions/x1/cancel", `{"reason":"r"}`, "Idempotency-Key", "can-1")
	if again.Status != 200 || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("reference, cancel re-sent across the rotation: %d %s; first %s", again.Status, again.Raw, first.Raw)
	}

	for _, f := range failures {
		t.Error(f)
	}
}

// TestKeyedResendsOnARetiredSecretAre503: the same re-sends where the function
// cannot learn the first call's key set (A retired too early): 503 until A
// is back, never a judgement (docs/operating.md: "without the key it
// answers 503 unavailable and the action stays as it was"). Before the fix
// the cancel-all was 422 and the claim 409.
func TestKeyedResendsOnARetiredSecretAre503(t *testing.T) {
	t.Parallel()
	onA := testkit.NewEnv(t, func(o *server.Options) { o.Secret = rotA })
	retired := testkit.NewEnv(t, func(o *server.Options) { o.Secret = `{"current":"` + rotB + `","ids":"` + rotA + `"}` })

	var failures []string
	create(t, onA, `{"actionId":"x1","userId":"u"}`)
	do(t, onA, "POST", "/actions/x1/cancel", `{"reason":"r"}`, "Idempotency-Key", "can-1")
	if r := do(t, retired, "POST", "/actions/x1/cancel", `{"reason":"r"}`, "Idempotency-Key", "can-1"); r.Status != 503 {
		t.Fatalf("reference, cancel: %d %s", r.Status, r.Raw)
	}

	create(t, onA, `{"actionId":"ca1","userId":"cu","kind":"z"}`)
	do(t, onA, "POST", "/users/cu/actions/cancel", `{"kind":"z"}`, "Idempotency-Key", "ca-1")
	if r := do(t, retired, "POST", "/users/cu/actions/cancel", `{"kind":"z"}`, "Idempotency-Key", "ca-1"); r.Status != 503 {
		failures = append(failures, "cancel-all re-sent, its first call's key set retired: "+r.Raw)
	}
	claim(t, onA, "hk", `{"fingerprint":"f"}`, "Idempotency-Key", "kc-1")
	if r := claim(t, retired, "hk", `{"fingerprint":"f"}`, "Idempotency-Key", "kc-1"); r.Status != 503 {
		failures = append(failures, "keyed claim re-sent, its first call's key set retired: "+r.Raw)
	}
	for _, f := range failures {
		t.Error(f)
	}
}

// TestSecretSourceThatHangsIsBounded: the secret source does not answer
// (Secrets Manager unreachable) when a request needs a key set the function
// lacks: the request answers 503 within seconds, not after the function's
// timeout. Before the fix it waited on the source without a bound (here the
// client gave up after 9 s; in Lambda an opaque timeout, no Retry-After).
func TestSecretSourceThatHangsIsBounded(t *testing.T) {
	t.Parallel()
	var hang sync.Mutex
	var hanging bool
	oldEnv := testkit.NewEnv(t, func(o *server.Options) {
		o.Secret = ""
		o.SecretSource = func(ctx context.Context) (string, error) {
			hang.Lock()
			h := hanging
			hang.Unlock()
			if h {
				<-ctx.Done()
				return "", ctx.Err()
			}
			return rotA, nil
		}
	})
	newEnv := testkit.NewEnv(t, func(o *server.Options) {
		o.Secret = `{"current":"` + rotB + `","previous":["` + rotA + `"],"ids":"` + rotA + `"}`
	})
	create(t, newEnv, `{"actionId":"b1","userId":"u","payload":"p"}`)
	hang.Lock()
	hanging = true
	hang.Unlock()
	time.Sleep(1100 * time.Millisecond)
	c := *client
	c.Timeout = 9 * time.Second // the function's timeout is 10 s
	start := time.Now()
	r, err := testkit.Send(&c, "POST", oldEnv.URL+"/actions/b1/consume", "")
	if err != nil {
		t.Fatalf("the request waited on the hanging secret source for %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	unavailable(t, "consume while the source hangs", r)
}

// unavailable checks a 503 unavailable with Retry-After whose body names
// nothing of the dependency and none of secrets.
func unavailable(t *testing.T, what string, r *testkit.Response, secrets ...string) {
	t.Helper()
	if r.Status != 503 || r.Str("error") != "unavailable" || r.Header.Get("Retry-After") == "" {
		t.Errorf("%s: %d %s (Retry-After %q), want 503 unavailable", what, r.Status, r.Raw, r.Header.Get("Retry-After"))
		return
	}
	var keys []string
	for k := range r.Body {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if strings.Join(keys, ",") != "error,message,requestId" {
		t.Errorf("%s: 503 body members %v: %s", what, keys, r.Raw)
	}
	low := strings.ToLower(r.Raw)
	for _, leak := range append([]string{"127.0.0.1", "dynamodb", "operation error", "serviceunavailable", "internal detail", "secret", "https://", "http://"}, secrets...) {
		if strings.Contains(low, strings.ToLower(leak)) {
			t.Errorf("%s: 503 body leaks %q: %s", what, leak, r.Raw)
		}
	}
}

// TestReusedKeyResentAcrossRotationSpendsNothingMore: docs/http-api.md, "What a keyed
// re-send is answered with": a re-send with another body spends an attempt,
// "recorded under that key and body, so re-sending the very same request
// ... spends nothing more". The secret rotates (A -> B current, A previous)
// between the 422 and its re-send: the very same request re-sent to the
// rotated function must answer the same 422 and spend nothing. The same
// for a create's key re-sent with another body.
func TestReusedKeyResentAcrossRotationSpendsNothingMore(t *testing.T) {
	t.Parallel()
	oldEnv, newEnv, _ := rotationPair(t) // old: A only; new: B current, A previous
	create(t, oldEnv, `{"actionId":"rk","userId":"u","pin":"2468","maxPinAttempts":5}`)
	if r := do(t, oldEnv, "POST", "/actions/rk/consume", `{"pin":"0000"}`, "Idempotency-Key", "k-1"); r.Status != 403 {
		t.Fatalf("first guess: %d %s", r.Status, r.Raw)
	}
	first := do(t, oldEnv, "POST", "/actions/rk/consume", `{"pin":"1111"}`, "Idempotency-Key", "k-1")
	if first.Status != 422 || first.Body["attemptsRemaining"] != 3.0 {
		t.Fatalf("reused key: %d %s", first.Status, first.Raw)
	}
	// The very same request, re-sent (its answer was lost) after the rotation reached this function.
	again := do(t, newEnv, "POST", "/actions/rk/consume", `{"pin":"1111"}`, "Idempotency-Key", "k-1")
	g := do(t, newEnv, "GET", "/actions/rk", "")
	if again.Status != 422 || again.Body["attemptsRemaining"] != 3.0 || g.Body["pinAttemptsRemaining"] != 3.0 {
		t.Errorf("the same 422 request re-sent across a rotation spent another guess: %d %s, GET %v", again.Status, again.Raw, g.Body["pinAttemptsRemaining"])
	}

	// The create path.
	create(t, oldEnv, `{"actionId":"rkc","userId":"u","pin":"1357","maxPinAttempts":3}`, "Idempotency-Key", "c-1")
	body := `{"actionId":"rkc","userId":"u","pin":"0000","maxPinAttempts":3}`
	c1 := do(t, oldEnv, "POST", "/actions", body, "Idempotency-Key", "c-1")
	c2 := do(t, newEnv, "POST", "/actions", body, "Idempotency-Key", "c-1")
	g = do(t, newEnv, "GET", "/actions/rkc", "")
	if c1.Status != 422 || c2.Status != 422 || c2.Body["attemptsRemaining"] != c1.Body["attemptsRemaining"] || g.Body["pinAttemptsRemaining"] != 2.0 {
		t.Errorf("create's reused key re-sent across a rotation: %s then %s, GET %v", c1.Raw, c2.Raw, g.Body["pinAttemptsRemaining"])
	}
}

// TestMangledRotationDocumentIsRefusedAndLogged: step one of a rotation
// reaches a warm function's secret mangled (a byte-order mark before the
// document). The function meets an item under B, re-reads the secret,
// refuses the value and logs that it did (without the secret), keeps A:
// the consume answers 503, nothing written, and a keyed create re-sent
// across the re-read is still the same action.
func TestMangledRotationDocumentIsRefusedAndLogged(t *testing.T) {
	t.Parallel()
	oldEnv, newEnv, setOld := rotationPair(t)
	c1 := do(t, oldEnv, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", "mangled-1")
	if c1.Status != 201 {
		t.Fatalf("create: %s", c1.Raw)
	}
	setOld("\uFEFF" + `{"current":"` + rotA + `","previous":["` + rotB + `"],"ids":"` + rotA + `"}`)
	create(t, newEnv, `{"actionId":"mb","userId":"u","pin":"2468","maxPinAttempts":1}`)
	if r := do(t, oldEnv, "POST", "/actions/mb/consume", `{"pin":"2468"}`); r.Status != 503 || r.Str("error") != "unavailable" {
		t.Fatalf("consume of an item under B on a function that refused the mangled secret: %d %s", r.Status, r.Raw)
	}
	if g := do(t, oldEnv, "GET", "/actions/mb", ""); g.Str("state") != "active" || g.Body["pinAttemptsRemaining"] != 1.0 {
		t.Fatalf("after the refused consume: %s", g.Raw)
	}
	c2 := do(t, oldEnv, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", "mangled-1")
	if c2.Status != 201 || c2.Str("actionId") != c1.Str("actionId") || c2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the keyed create re-sent after the refused re-read: %s (first %s)", c2.Raw, c1.Raw)
	}
	logs := oldEnv.Log.String()
	if !strings.Contains(logs, "server secret re-read failed") {
		t.Fatalf("the refused secret was not logged:\n%s", logs)
	}
	if strings.Contains(logs, rotA) || strings.Contains(logs, rotB) {
		t.Fatal("a secret reached the logs")
	}
}

// TestHostedKeyFingerprintAcrossRotation: a hosted key's fingerprint is
// stored keyed under the key set current at its claim. After a rotation
// (A -> B current, A previous) the same fingerprint still replays and
// another is still refused, on a function rotated first and on one that
// has not re-read the secret yet (it meets B's fingerprint, re-reads and
// compares; it never answers fingerprint_mismatch for what it could not
// compare).
func TestHostedKeyFingerprintAcrossRotation(t *testing.T) {
	t.Parallel()
	oldEnv, newEnv, setOld := rotationPair(t) // old: A only; new: B current, A previous
	body := `{"fingerprint":"sha256:9f2c"}`
	finish := func(env *testkit.Env, key string) {
		t.Helper()
		c := claim(t, env, key, body)
		if c.Status != 201 {
			t.Fatalf("claim %s: %d %s", key, c.Status, c.Raw)
		}
		if r := do(t, env, "POST", "/keys/"+key+"/complete", `{"token":"`+c.Str("token")+`","response":"`+key+`"}`); r.Status != 200 {
			t.Fatalf("complete %s: %s", key, r.Raw)
		}
	}
	finish(oldEnv, "under-a") // stored under A
	finish(newEnv, "under-b") // stored under B
	for _, c := range []struct {
		env  *testkit.Env
		name string
	}{{newEnv, "the rotated function"}, {oldEnv, "a function not yet re-read"}} {
		for _, key := range []string{"under-a", "under-b"} {
			if r := claim(t, c.env, key, body); r.Status != 200 || r.Str("response") != key {
				t.Fatalf("%s, %s claimed again with its fingerprint: %d %s, want the replay", c.name, key, r.Status, r.Raw)
			}
			if r := claim(t, c.env, key, `{"fingerprint":"sha256:other"}`); r.Status != 422 || r.Str("error") != "fingerprint_mismatch" {
				t.Fatalf("%s, %s with another fingerprint: %d %s, want 422", c.name, key, r.Status, r.Raw)
			}
		}
		// The old function's source lists B from here on (step 1 of the
		// rotation reached it); it re-reads when it meets B's fingerprint.
		setOld(`{"current":"` + rotA + `","previous":["` + rotB + `"],"ids":"` + rotA + `"}`)
	}
}
