package httpapi_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
)

func ids(r *testkit.Response) []string {
	var out []string
	for _, a := range r.Body["actions"].([]any) {
		out = append(out, a.(map[string]any)["actionId"].(string))
	}
	return out
}

// TestListUserActions: newest first, paged by an opaque cursor, filtered by
// kind and state, never the payload; one Query and one BatchGetItem a page.
func TestListUserActions(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for i := range 7 {
		kind := "login"
		if i%2 == 1 {
			kind = "coupon"
		}
		create(t, env, fmt.Sprintf(`{"actionId":"a%d","userId":"u 1","kind":"%s","payload":"secret-%d"}`, i, kind, i))
		time.Sleep(2 * time.Millisecond) // distinct creation times
	}
	create(t, env, `{"actionId":"other","userId":"u2"}`)
	do(t, env, "POST", "/actions/a6/consume", ``)
	do(t, env, "POST", "/actions/a4/cancel", ``)
	env.Counter.Take()

	base := "/users/" + url.PathEscape("u 1") + "/actions"
	var got []string
	query := "?limit=3" // the first page has no cursor (an empty one is 400)
	for pages := 0; ; pages++ {
		r := do(t, env, "GET", base+query, "")
		expect(t, env, r, 200, "", map[string]int{"Query": 1, "BatchGetItem": 1})
		if strings.Contains(r.Raw, "secret-") || strings.Contains(r.Raw, "payload") {
			t.Fatalf("a listing holds a payload: %s", r.Raw)
		}
		got = append(got, ids(r)...)
		cursor := r.Str("cursor")
		if cursor == "" {
			break
		}
		query = "?limit=3&cursor=" + url.QueryEscape(cursor)
		if pages > 5 {
			t.Fatal("cursor never ends")
		}
	}
	if strings.Join(got, ",") != "a6,a5,a4,a3,a2,a1,a0" {
		t.Fatalf("paged listing: %v", got)
	}
	for q, want := range map[string]string{
		"?kind=coupon":                     "a5,a3,a1",
		"?kind=login&state=active":         "a2,a0",
		"?state=consumed":                  "a6",
		"?state=expired":                   "a4", // canceled reads as expired
		"?kind=login&state=active&limit=1": "a2",
	} {
		r := do(t, env, "GET", base+q, "")
		if r.Status != 200 || strings.Join(ids(r), ",") != want {
			t.Errorf("%s: %d %v, want %s", q, r.Status, r.Raw, want)
		}
	}
	env.Counter.Take()
	for _, q := range []string{"?limit=0", "?limit=101", "?state=open", "?kind=a%20b", "?cursor=not-ours"} {
		r := do(t, env, "GET", base+q, "")
		expect(t, env, r, 400, "invalid_request", none)
	}
	// Another tenant's user of the same name is another user.
	tenantEnv := testkit.NewEnv(t, withTenants)
	as(t, tenantEnv, alpha, "POST", "/actions", `{"actionId":"x1","userId":"shared-user"}`)
	if r := as(t, tenantEnv, beta, "GET", "/users/shared-user/actions", ""); r.Status != 200 || len(ids(r)) != 0 {
		t.Fatalf("beta lists alpha's user: %s", r.Raw)
	}
	if r := as(t, tenantEnv, alpha, "GET", "/users/shared-user/actions", ""); len(ids(r)) != 1 {
		t.Fatalf("alpha lists its user: %s", r.Raw)
	}
	if r := as(t, tenantEnv, beta, "POST", "/users/shared-user/actions/cancel", ``); r.Body["canceled"] != 0.0 {
		t.Fatalf("beta cancels alpha's user: %s", r.Raw)
	}
	if r := as(t, tenantEnv, alpha, "GET", "/actions/x1", ""); r.Str("state") != "active" {
		t.Fatalf("alpha's action after beta's cancel-all: %s", r.Raw)
	}
}

// TestCancelAllRacingConsumes: 20 open actions of a user, 50 concurrent
// consumes against them and a cancel-all at once. Each action ends
// consumed or canceled, never both, and every answer matches the item.
func TestCancelAllRacingConsumes(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	// How long a cancel-all of 20 takes here: the consumes are spread over
	// that window, so some land before its writes and some after.
	for i := range 20 {
		create(t, env, fmt.Sprintf(`{"actionId":"w-%d","userId":"warm","kind":"login"}`, i))
	}
	t0 := time.Now()
	do(t, env, "POST", "/users/warm/actions/cancel", ``)
	window := time.Since(t0)
	totalConsumed, totalCanceled := 0, 0
	for round := range 5 {
		user := fmt.Sprintf("racer-%d", round)
		for i := range 20 {
			create(t, env, fmt.Sprintf(`{"actionId":"r%d-%d","userId":"%s","kind":"login"}`, round, i, user))
		}
		var mu sync.Mutex
		consumedBy := map[string]int{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 50 {
			wg.Go(func() {
				<-start
				// Spread over the cancel-all's own few milliseconds, so some
				// consumes come before its write and some after.
				time.Sleep(time.Duration(rand.Int64N(int64(window))))
				id := fmt.Sprintf("r%d-%d", round, g%20)
				r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", ``)
				if err == nil && r.Status == 200 {
					mu.Lock()
					consumedBy[id]++
					mu.Unlock()
				}
			})
		}
		var all *testkit.Response
		wg.Go(func() {
			<-start
			var err error
			all, err = testkit.Send(client, "POST", env.URL+"/users/"+user+"/actions/cancel", `{"reason":"password changed"}`, "Idempotency-Key", "sign-out-"+user)
			if err != nil {
				t.Error(err)
			}
		})
		close(start)
		wg.Wait()
		canceled := map[string]bool{}
		for _, id := range all.Body["actionIds"].([]any) {
			canceled[id.(string)] = true
		}
		if all.Body["canceled"] != float64(len(canceled)) {
			t.Fatalf("count %v vs ids %v", all.Body["canceled"], canceled)
		}
		for i := range 20 {
			id := fmt.Sprintf("r%d-%d", round, i)
			g := do(t, env, "GET", "/actions/"+id, "")
			isConsumed, isCanceled := g.Str("consumedAt") != "", g.Str("canceledAt") != ""
			switch {
			case isConsumed == isCanceled:
				t.Fatalf("%s: consumed %v and canceled %v: %s", id, isConsumed, isCanceled, g.Raw)
			case isConsumed && (consumedBy[id] != 1 || canceled[id]):
				t.Fatalf("%s consumed, but %d consume answers said so and cancel-all said canceled=%v", id, consumedBy[id], canceled[id])
			case isCanceled && (consumedBy[id] != 0 || !canceled[id] || g.Str("cancelReason") != "password changed"):
				t.Fatalf("%s canceled, but consumes answered %d and cancel-all listed it %v", id, consumedBy[id], canceled[id])
			}
		}
		// A retry with the key answers the same set; a keyless one cancels nothing more.
		again := do(t, env, "POST", "/users/"+user+"/actions/cancel", `{"reason":"password changed"}`, "Idempotency-Key", "sign-out-"+user)
		if again.Status != 200 || again.Raw != all.Raw {
			t.Fatalf("retried cancel-all: %s, first %s", again.Raw, all.Raw)
		}
		if r := do(t, env, "POST", "/users/"+user+"/actions/cancel", ``); r.Body["canceled"] != 0.0 {
			t.Fatalf("a second cancel-all: %s", r.Raw)
		}
		totalConsumed += len(consumedBy)
		totalCanceled += len(canceled)
	}
	t.Logf("cancel-all vs 50 consumes (spread over %s) over 20 actions, 5 rounds: %d consumed, %d canceled, none both", window, totalConsumed, totalCanceled)
}

// TestCancelAllByKind and its request count: one Query, one BatchGetItem,
// one UpdateItem per open action of the kind.
func TestCancelAllByKind(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for i, kind := range []string{"login", "login", "coupon", "login"} {
		create(t, env, fmt.Sprintf(`{"actionId":"k%d","userId":"u","kind":"%s"}`, i, kind))
	}
	do(t, env, "POST", "/actions/k3/consume", ``)
	env.Counter.Take()
	r := do(t, env, "POST", "/users/u/actions/cancel", `{"kind":"login","reason":"sign out"}`)
	expect(t, env, r, 200, "", map[string]int{"Query": 1, "BatchGetItem": 1, "UpdateItem": 2})
	if r.Raw != `{"canceled":2,"actionIds":["k0","k1"]}`+"\n" {
		t.Fatalf("cancel-all by kind: %s", r.Raw)
	}
	if g := do(t, env, "GET", "/actions/k2", ""); g.Str("state") != "active" {
		t.Fatalf("another kind was canceled: %s", g.Raw)
	}
}

// TestSupersede: a new link cancels the user's earlier open links of its
// kind (a consumed one keeps its win); a retry replays; of concurrent
// superseding creates at most one stays open.
func TestSupersede(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"l1","userId":"u","kind":"login"}`)
	create(t, env, `{"actionId":"l2","userId":"u","kind":"login"}`)
	create(t, env, `{"actionId":"c1","userId":"u","kind":"coupon"}`)
	do(t, env, "POST", "/actions/l2/consume", ``)
	time.Sleep(2 * time.Millisecond)
	env.Counter.Take()
	body := `{"actionId":"l3","userId":"u","kind":"login","supersede":true}`
	r := do(t, env, "POST", "/actions", body, "Idempotency-Key", "new-link-1")
	if r.Status != 201 || r.Str("state") != "active" {
		t.Fatalf("superseding create: %s", r.Raw)
	}
	t.Logf("superseding create over 3 earlier actions (1 open of its kind): %v", env.Counter.Take())
	for id, want := range map[string]string{"l1": "superseded", "l2": "", "c1": ""} {
		g := do(t, env, "GET", "/actions/"+id, "")
		if g.Str("cancelReason") != want {
			t.Errorf("%s: %s", id, g.Raw)
		}
	}
	if g := do(t, env, "GET", "/actions/l2", ""); g.Str("state") != "consumed" {
		t.Fatalf("the consumed link lost its win: %s", g.Raw)
	}
	again := do(t, env, "POST", "/actions", body, "Idempotency-Key", "new-link-1")
	if again.Status != 201 || again.Header.Get("Idempotent-Replayed") != "true" || again.Str("actionId") != "l3" {
		t.Fatalf("retried superseding create: %s", again.Raw)
	}

	// Concurrent superseding creates for one user and kind.
	for round := range 10 {
		user := fmt.Sprintf("c%d", round)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				r, err := testkit.Send(client, "POST", env.URL+"/actions", fmt.Sprintf(`{"actionId":"%s-%d","userId":"%s","kind":"login","supersede":true}`, user, g, user))
				if err != nil || r.Status != 201 {
					t.Errorf("concurrent superseding create: %v %v", err, r)
				}
			})
		}
		wg.Wait()
		open := 0
		for g := range 8 {
			if s := do(t, env, "GET", fmt.Sprintf("/actions/%s-%d", user, g), "").Str("state"); s == "active" {
				open++
			}
		}
		if open != 1 {
			t.Fatalf("round %d: %d of 8 concurrent superseding creates stayed open, want exactly 1", round, open)
		}
	}
}

// TestSupersedeEvents: each cancellation a supersede or a cancel-all makes
// is the usual action.canceled, with its reason.
func TestSupersedeEvents(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.WithEvents)
	create(t, env, `{"actionId":"e1","userId":"ev","kind":"login"}`)
	create(t, env, `{"actionId":"e2","userId":"ev","kind":"login","supersede":true}`)
	create(t, env, `{"actionId":"e3","userId":"ev","kind":"coupon"}`)
	do(t, env, "POST", "/users/ev/actions/cancel", `{"reason":"password changed"}`)
	want := map[string]string{"e1": "superseded", "e2": "password changed", "e3": "password changed"}
	got := map[string]string{}
	deadline := time.Now().Add(testkit.Patience)
	for len(got) < len(want) && time.Now().Before(deadline) {
		for _, e := range env.Bus.Events() {
			var d struct{ ActionID, Reason string }
			if e.DetailType == "action.canceled" && json.Unmarshal(e.Detail, &d) == nil {
				got[d.ActionID] = d.Reason
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("action.canceled events: %v, want %v", got, want)
	}
}
