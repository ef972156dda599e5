package httpapi_test

// Writes under lost answers (issue 21, item 7): the write that makes a
// change stamps its own time. Also the environments whose DynamoDB traffic
// crosses the fault proxy (proxied, hooked), used across this package.

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

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
)

// proxied is an Env whose DynamoDB traffic crosses a fault proxy.
func proxied(t *testing.T) (*testkit.Env, *faults.Proxy) {
	t.Helper()
	p, err := faults.Start(testkit.DynamoDB(t), faults.Rates{}, 1, "UpdateItem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	env := testkit.NewEnv(t, func(o *server.Options) { o.AWS.BaseEndpoint = aws.String(p.URL) })
	return env, p
}

// hooked is an Env whose DynamoDB traffic crosses the fault proxy and then
// a hook that sees every UpdateItem before it is forwarded (n counts them).
func hooked(t *testing.T, hook func(n int32), opts ...func(*server.Options)) (*testkit.Env, *faults.Proxy) {
	return hookedOp(t, "UpdateItem", hook, opts...)
}

// hookedOp is hooked for the requests of operation op.
func hookedOp(t *testing.T, op string, hook func(n int32), opts ...func(*server.Options)) (*testkit.Env, *faults.Proxy) {
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
	opts = append([]func(*server.Options){func(o *server.Options) { o.AWS.BaseEndpoint = aws.String(hs.URL) }}, opts...)
	return testkit.NewEnv(t, opts...), p
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
