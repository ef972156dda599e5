package httpapi_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestUseStampedWhenItsWriteGoesOut: a take's or a release's first step is
// slow (2 s: the release's read of the gate, or a keyed call's own record
// write), and a listing of the uses in that time sees the use as it was.
// The use's time (usedAt, releasedAt) is after that listing: it is the time
// its gate write goes out, not the request's start. (It was the request's
// start: a release stamped 2 s before a listing that saw the use still
// held, a take 2 s before one that saw it not yet taken.)
func TestUseStampedWhenItsWriteGoesOut(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, op, path, body string
		key                  string
		heldBefore           bool // the use is held before the call
		field                string
	}{
		{"release-slow-gate-read", "BatchGetItem", "/uses/dev/release", "", "", true, "releasedAt"},
		{"keyed-release-slow-record-write", "UpdateItem", "/uses/dev/release", "", "sl-rel", true, "releasedAt"},
		{"keyed-take-slow-record-write", "UpdateItem", "/consume", `{"useId":"dev"}`, "sl-take", false, "usedAt"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id := "sl" + string(rune('a'+i))
			var env *testkit.Env
			var armed atomic.Bool
			var listedAt atomic.Int64
			env, _ = hookedOp(t, c.op, func(int32) {
				if !armed.CompareAndSwap(true, false) {
					return
				}
				time.Sleep(2 * time.Second)
				at := time.Now()
				l, err := testkit.Send(client, "GET", env.URL+"/actions/"+id+"/uses", "")
				if err == nil && strings.Contains(l.Raw, `"useId":"dev"`) == c.heldBefore {
					listedAt.Store(at.UnixMilli())
				}
			})
			create(t, env, `{"actionId":"`+id+`","userId":"u","maxUses":3,"releasable":true}`)
			if c.heldBefore {
				if r := do(t, env, "POST", "/actions/"+id+"/consume", `{"useId":"dev"}`); r.Status != 200 {
					t.Fatal(r.Raw)
				}
			}
			var hdr []string
			if c.key != "" {
				hdr = []string{"Idempotency-Key", c.key}
			}
			armed.Store(true)
			r := do(t, env, "POST", "/actions/"+id+c.path, c.body, hdr...)
			if r.Status != 200 || listedAt.Load() == 0 {
				t.Fatalf("%d %s; the listing during the slow step saw the use as it was: %v", r.Status, r.Raw, listedAt.Load() != 0)
			}
			at, err := time.Parse(time.RFC3339Nano, r.Str(c.field))
			listed := time.UnixMilli(listedAt.Load())
			if err != nil || at.Before(listed) {
				t.Errorf("%s %s, before a listing at %s that saw the use as it was before the call", c.field, r.Str(c.field), listed.UTC().Format(time.RFC3339Nano))
			}
		})
	}
}
