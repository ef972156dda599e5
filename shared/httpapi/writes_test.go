package httpapi_test

// Two-write paths under lost answers (issue 21, items 7 and 10), through the
// real handlers on DynamoDB Local behind the fault proxy.

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
)

// hooked is an Env whose DynamoDB traffic crosses the fault proxy and then
// a hook that sees every UpdateItem before it is forwarded (n counts them).
func hooked(t *testing.T, hook func(n int32)) (*testkit.Env, *faults.Proxy) {
	return hookedOp(t, "UpdateItem", hook)
}

// hookedOp is hooked for the requests of operation op.
func hookedOp(t *testing.T, op string, hook func(n int32)) (*testkit.Env, *faults.Proxy) {
	t.Helper()
	p, err := faults.Start(testkit.DynamoDB(t), faults.Rates{}, 1, "UpdateItem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	target, _ := url.Parse(p.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	// A lost answer stays lost: the SDK sees its connection closed.
	rp.ErrorHandler = func(http.ResponseWriter, *http.Request, error) { panic(http.ErrAbortHandler) }
	var n atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), "."+op) {
			hook(n.Add(1))
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	env := testkit.NewEnv(t, func(o *server.Options) { o.AWS.BaseEndpoint = aws.String(hs.URL) })
	return env, p
}

// TestTwoWritePathsStampTheirOwnTime (item 7): the write that makes the
// change takes its own clock. A PIN consume whose first write lost its
// answer (the SDK re-sent it) while time passed: a GET between the two
// writes saw the action active, so consumedAt must not be earlier than that
// GET. Before the fix consumedAt was the request's start, 30 s before the
// GET. The same for a reused key's guess that locks (lockedAt).
func TestTwoWritePathsStampTheirOwnTime(t *testing.T) {
	t.Parallel()
	const gap = 30 * time.Second
	var env *testkit.Env
	var sawOpen atomic.Value // time.Time: the server clock when a GET saw the action open
	var armed atomic.Int32   // the UpdateItem number at which time jumps
	env, proxy := hooked(t, func(n int32) {
		if n != armed.Load() {
			return
		}
		env.Shift(gap) // the SDK's re-send took its time
		at := time.Now().Add(gap)
		// (In the proxy's goroutine: an error is reported by the missing mark.)
		if g, err := testkit.Send(client, "GET", env.URL+"/actions/tw", ""); err == nil && g.Str("state") == "active" && g.Str("consumedAt") == "" {
			sawOpen.Store(at)
		}
	})
	create(t, env, `{"actionId":"tw","userId":"u","pin":"2468","payload":{"k":"v"}}`)
	armed.Store(3) // create was 1; the consume's write 1 is 2 (answer lost), its re-send 3
	proxy.PassThenDrop(0, 1)
	r := do(t, env, "POST", "/actions/tw/consume", `{"pin":"2468"}`)
	if r.Status != 200 {
		t.Fatalf("consume: %d %s", r.Status, r.Raw)
	}
	seen, ok := sawOpen.Load().(time.Time)
	if !ok {
		t.Fatal("no GET saw the action open between the two writes")
	}
	consumedAt, _ := time.Parse(time.RFC3339Nano, r.Str("consumedAt"))
	if consumedAt.Before(seen.Truncate(time.Millisecond)) {
		t.Fatalf("consumedAt %s is before a GET saw the action open at %s", consumedAt.Format(time.RFC3339Nano), seen.Format(time.RFC3339Nano))
	}
	if g := do(t, env, "GET", "/actions/tw", ""); g.Str("consumedAt") != r.Str("consumedAt") {
		t.Fatalf("stored consumedAt %s, answered %s", g.Str("consumedAt"), r.Str("consumedAt"))
	}

	// A create re-sent under its key with another PIN: write 1 (the create)
	// fails, write 2 spends the last guess and so stamps lockedAt.
	env.Shift(0)
	create(t, env, `{"actionId":"tl","userId":"u","pin":"1357","maxPinAttempts":1}`, "Idempotency-Key", "tl-1")
	before := time.Now()
	armed.Store(6) // 4 was the consume's write 2, 5 the create; 6 is the re-sent create (write 1), 7 the spend
	r = do(t, env, "POST", "/actions", `{"actionId":"tl","userId":"u","pin":"0000","maxPinAttempts":1}`, "Idempotency-Key", "tl-1")
	if r.Status != 422 {
		t.Fatalf("reused key: %d %s", r.Status, r.Raw)
	}
	g := do(t, env, "GET", "/actions/tl", "")
	lockedAt, _ := time.Parse(time.RFC3339Nano, g.Str("lockedAt"))
	if lockedAt.Before(before.Add(gap).Truncate(time.Millisecond)) {
		t.Fatalf("lockedAt %s is the request's start, not the locking write's time (≥ %s)", g.Str("lockedAt"), before.Add(gap).Format(time.RFC3339Nano))
	}
}

// TestCancelAllStampsEachCancel (item 7): cancel-all reads the user's
// actions, then cancels each with its own write, which stamps its own time.
// A GET after the reads (here they took 30 s) saw the action open, so its
// canceledAt must not be earlier. Before the fix every canceledAt was the
// request's start.
func TestCancelAllStampsEachCancel(t *testing.T) {
	t.Parallel()
	const gap = 30 * time.Second
	var env *testkit.Env
	var shifted atomic.Bool
	env, _ = hookedOp(t, "BatchGetItem", func(int32) {
		if !shifted.Swap(true) {
			env.Shift(gap)
		}
	})
	create(t, env, `{"actionId":"ca","userId":"cu"}`)
	var r *testkit.Response
	// The user index is eventually consistent: retry until the call saw it.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		before := time.Now()
		if r = do(t, env, "POST", "/users/cu/actions/cancel", ``); r.Status == 200 && r.Body["canceled"] == 1.0 {
			g := do(t, env, "GET", "/actions/ca", "")
			canceledAt, _ := time.Parse(time.RFC3339Nano, g.Str("canceledAt"))
			if canceledAt.Before(before.Add(gap).Truncate(time.Millisecond)) {
				t.Fatalf("canceledAt %s is before the reads ended (≥ %s)", g.Str("canceledAt"), before.Add(gap).Format(time.RFC3339Nano))
			}
			return
		}
		shifted.Store(false)
		env.Shift(0)
	}
	t.Fatalf("cancel-all never canceled the action: %s", r.Raw)
}

// TestReusedKeyGuessLostAnswerCountsOnce (item 10): a reused key on a PIN
// action spends a guess with its own write (the 422 path). When that
// write's answer is lost and the SDK re-sends it, it must count once.
// Before the fix the re-send counted again (3 → 1). A keyed re-send of the
// same request (same key, same body) counts nothing either: it compares
// nothing new.
func TestReusedKeyGuessLostAnswerCountsOnce(t *testing.T) {
	t.Parallel()
	env, proxy := proxied(t)
	create(t, env, `{"actionId":"rg","userId":"u","pin":"2468","maxPinAttempts":4}`)
	if r := do(t, env, "POST", "/actions/rg/consume", `{"pin":"0000"}`, "Idempotency-Key", "g-1"); r.Status != 403 {
		t.Fatalf("first guess: %d %s", r.Status, r.Raw)
	}
	// The same key with another PIN: write 1 (the reservation) is refused,
	// write 2 spends the guess; its answer is lost.
	proxy.PassThenDrop(1, 1)
	r := do(t, env, "POST", "/actions/rg/consume", `{"pin":"1111"}`, "Idempotency-Key", "g-1")
	proxy.PassThenDrop(0, 0)
	if r.Status != 422 {
		t.Fatalf("reused key: %d %s", r.Status, r.Raw)
	}
	if proxy.Counts().Dropped != 1 {
		t.Fatalf("fault proxy: %s", proxy)
	}
	remaining := func() any { return do(t, env, "GET", "/actions/rg", "").Body["pinAttemptsRemaining"] }
	if n := remaining(); n != 2.0 {
		t.Fatalf("after one wrong guess and one reused key: %v attempts remain, want 2", n)
	}
	env.Counter.Take()
	expect(t, env, do(t, env, "POST", "/actions/rg/consume", `{"pin":"1111"}`, "Idempotency-Key", "g-1"), 422, "idempotency_key_reused", twoUpdates)
	if n := remaining(); n != 2.0 {
		t.Fatalf("keyed re-send of the same request counted again: %v remain", n)
	}
	// Another body under the key is another guess.
	if r := do(t, env, "POST", "/actions/rg/consume", `{"pin":"2222"}`, "Idempotency-Key", "g-1"); r.Status != 422 {
		t.Fatalf("another body: %d %s", r.Status, r.Raw)
	}
	if n := remaining(); n != 1.0 {
		t.Fatalf("another body under the key: %v remain, want 1", n)
	}

	// The create path: a key re-sent with another PIN, the spend's answer lost.
	create(t, env, `{"actionId":"rc2","userId":"u","pin":"1357","maxPinAttempts":3}`, "Idempotency-Key", "c-1")
	proxy.PassThenDrop(1, 1)
	r = do(t, env, "POST", "/actions", `{"actionId":"rc2","userId":"u","pin":"0000","maxPinAttempts":3}`, "Idempotency-Key", "c-1")
	proxy.PassThenDrop(0, 0)
	if r.Status != 422 {
		t.Fatalf("create, reused key: %d %s", r.Status, r.Raw)
	}
	if n := rawItem(t, env, "rc2")["pinFailures"].(*types.AttributeValueMemberN).Value; n != "1" {
		t.Fatalf("create's reused key with a lost answer: pinFailures = %s, want 1", n)
	}
}

// TestReusedKeyGuessesUnderFaults (item 10): three other bodies under one
// key, each sent twice, while 30% of the UpdateItem answers are lost (the
// SDK re-sends; a 503 is re-sent by the caller). Each body is one guess,
// whatever was lost: 1 + 3 counted. Without the fence it counted 8 (every
// re-send, and every lost answer's SDK re-send, counted again).
func TestReusedKeyGuessesUnderFaults(t *testing.T) {
	t.Parallel()
	env, proxy := proxied(t)
	create(t, env, `{"actionId":"rf","userId":"u","pin":"2468","maxPinAttempts":10}`)
	if r := do(t, env, "POST", "/actions/rf/consume", `{"pin":"0000"}`, "Idempotency-Key", "f-1"); r.Status != 403 {
		t.Fatalf("first guess: %d %s", r.Status, r.Raw)
	}
	proxy.SetRates(faults.Rates{DropAfter: 0.3})
	for i := range 6 {
		body := `{"pin":"111` + string(rune('1'+i%3)) + `"}`
		for attempt := 0; ; attempt++ {
			r := do(t, env, "POST", "/actions/rf/consume", body, "Idempotency-Key", "f-1")
			if r.Status == 422 {
				break
			}
			if r.Status != 503 || attempt == 20 {
				t.Fatalf("send %d of %s: %d %s", i, body, r.Status, r.Raw)
			}
		}
	}
	proxy.SetRates(faults.Rates{})
	t.Logf("fault proxy: %s", proxy)
	if n := rawItem(t, env, "rf")["pinFailures"].(*types.AttributeValueMemberN).Value; n != "4" {
		t.Fatalf("pinFailures = %s, want 4 (one wrong PIN, three other bodies)", n)
	}
}
