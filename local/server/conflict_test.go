package server_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/awsconfig"
)

// conflictEnv is a local server whose DynamoDB UpdateItem requests cross a
// fault proxy that can answer ReplicatedWriteConflictException (what an MRSC
// table answers a write racing one from another Region), with the
// product's own SDK configuration (config.Local: its retryer).
func conflictEnv(t *testing.T, rates faults.Rates) (*testkit.Env, *faults.Proxy) {
	t.Helper()
	proxy, err := faults.Start(testkit.DynamoDB(t), rates, 25, "UpdateItem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	env := testkit.NewEnv(t, func(o *server.Options) {
		cfg := awsconfig.Local(proxy.URL)
		o.AWS, o.DynamoDBEndpoint = &cfg, proxy.URL
	})
	return env, proxy
}

// TestReplicatedWriteConflicts (issue 25): a consume, a PIN consume (its
// reserving write and its consuming write), a wrong PIN, a cancel and a keys
// claim each meet one ReplicatedWriteConflictException; the SDK retries it
// and each is answered as without the conflict, counted once, never a 5xx.
// Conflicts on every attempt are a 503 that wrote nothing, and the caller's
// retry then succeeds. Before the fix each conflict was a 500.
func TestReplicatedWriteConflicts(t *testing.T) {
	t.Parallel()
	env, proxy := conflictEnv(t, faults.Rates{})
	post := func(path, body string, headers ...string) *testkit.Response {
		return testkit.Do(t, nil, "POST", env.URL+path, body, headers...)
	}
	for _, c := range []string{
		`{"actionId":"c-1","userId":"u"}`, `{"actionId":"x-1","userId":"u"}`, `{"actionId":"e-1","userId":"u"}`,
		`{"actionId":"p-1","userId":"u","pin":"4821","payload":{"k":"v"}}`, `{"actionId":"p-2","userId":"u","pin":"4821"}`,
		`{"actionId":"p-3","userId":"u","pin":"4821","payload":{"k":"v"}}`,
	} {
		if r := post("/actions", c); r.Status != 201 {
			t.Fatalf("create %s: %d %s", c, r.Status, r.Raw)
		}
	}
	injected := 0
	conflict := func(what string, pass, n int, send func() *testkit.Response, wantStatus int) *testkit.Response {
		t.Helper()
		before := proxy.Counts()
		proxy.PassThenConflict(pass, n)
		r := send()
		after := proxy.Counts()
		injected += int(after.Conflicts - before.Conflicts)
		if after.Conflicts-before.Conflicts != int64(n) {
			t.Fatalf("%s: %d conflicts injected, want %d", what, after.Conflicts-before.Conflicts, n)
		}
		if r.Status != wantStatus {
			t.Fatalf("%s with %d conflict(s): %d %s, want %d", what, n, r.Status, r.Raw, wantStatus)
		}
		t.Logf("%s: %d conflict(s) injected, %d UpdateItem requests, answered %d", what, n, after.Requests-before.Requests, r.Status)
		return r
	}
	get := func(id string) *testkit.Response { return testkit.Do(t, nil, "GET", env.URL+"/actions/"+id, "") }

	r := conflict("consume", 0, 1, func() *testkit.Response { return post("/actions/c-1/consume", `{"reason":"r"}`) }, 200)
	if g := get("c-1"); g.Str("state") != "consumed" || g.Str("consumedAt") != r.Str("consumedAt") {
		t.Fatalf("consume answered %s, item %s", r.Raw, g.Raw)
	}
	r = conflict("PIN consume, reserving write", 0, 1, func() *testkit.Response {
		return post("/actions/p-1/consume", `{"pin":"4821"}`, "Idempotency-Key", "pk-1")
	}, 200)
	if g := get("p-1"); g.Str("state") != "consumed" || g.Str("consumedAt") != r.Str("consumedAt") || r.Body["payload"] == nil || g.Body["pinAttemptsRemaining"] != 3.0 {
		t.Fatalf("PIN consume answered %s, item %s", r.Raw, g.Raw)
	}
	r = conflict("wrong PIN", 0, 1, func() *testkit.Response { return post("/actions/p-2/consume", `{"pin":"0000"}`) }, 403)
	if g := get("p-2"); r.Body["attemptsRemaining"] != 2.0 || g.Body["pinAttemptsRemaining"] != 2.0 {
		t.Fatalf("wrong PIN counted other than once: answered %s, item %s", r.Raw, g.Raw)
	}
	r = conflict("right PIN, consuming write", 1, 1, func() *testkit.Response { return post("/actions/p-2/consume", `{"pin":"4821"}`) }, 200)
	if g := get("p-2"); g.Str("state") != "consumed" || g.Str("consumedAt") != r.Str("consumedAt") || g.Body["pinAttemptsRemaining"] != 2.0 {
		t.Fatalf("PIN consume answered %s, item %s", r.Raw, g.Raw)
	}
	r = conflict("cancel", 0, 1, func() *testkit.Response { return post("/actions/x-1/cancel", `{"reason":"r"}`) }, 200)
	if g := get("x-1"); g.Str("canceledAt") == "" || g.Str("canceledAt") != r.Str("canceledAt") {
		t.Fatalf("cancel answered %s, item %s", r.Raw, g.Raw)
	}
	r = conflict("keys claim", 0, 1, func() *testkit.Response { return post("/keys/k-1/claim", `{"fingerprint":"f"}`) }, 201)
	if k := testkit.Do(t, nil, "GET", env.URL+"/keys/k-1", ""); r.Str("token") == "" || k.Body["attempts"] != 1.0 {
		t.Fatalf("claim answered %s, key %s", r.Raw, k.Raw)
	}
	// Every attempt of the SDK meets a conflict: 503 with Retry-After, nothing
	// written; the caller's retry is answered as the first try would have been.
	r = conflict("consume, every attempt", 0, 3, func() *testkit.Response { return post("/actions/e-1/consume", "") }, 503)
	if r.Str("error") != "unavailable" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("retries exhausted: %s", r.Raw)
	}
	if g := get("e-1"); g.Str("state") != "active" {
		t.Fatalf("a 503 wrote: %s", g.Raw)
	}
	if r := post("/actions/e-1/consume", ""); r.Status != 200 {
		t.Fatalf("retry after the 503: %d %s", r.Status, r.Raw)
	}
	// A right PIN whose consuming write meets a conflict on every attempt:
	// 503 after its attempt was reserved; the keyed retry finds its own
	// reservation, consumes once and returns the payload, counting no guess.
	r = conflict("right PIN, consuming write, every attempt", 1, 3, func() *testkit.Response {
		return post("/actions/p-3/consume", `{"pin":"4821"}`, "Idempotency-Key", "pk-3")
	}, 503)
	if g := get("p-3"); g.Str("state") != "active" || r.Str("error") != "unavailable" {
		t.Fatalf("a 503 (%s) consumed: %s", r.Raw, g.Raw)
	}
	if r := post("/actions/p-3/consume", `{"pin":"4821"}`, "Idempotency-Key", "pk-3"); r.Status != 200 || r.Body["payload"] == nil {
		t.Fatalf("keyed retry after the 503: %d %s", r.Status, r.Raw)
	} else if g := get("p-3"); g.Str("consumedAt") != r.Str("consumedAt") || g.Body["pinAttemptsRemaining"] != 3.0 {
		t.Fatalf("keyed retry answered %s, item %s", r.Raw, g.Raw)
	}
	// Each conflict was retried by the SDK but the third of each exhausted call.
	t.Logf("planned: %d conflicts injected, %d retried by the SDK; 8 calls met them: 6 answered as without a conflict, 2 exhausted the SDK's 3 attempts (503, the consume not applied) and their caller's keyed retry got 200; proxy: %s",
		injected, injected-2, proxy)
}

// TestReplicatedWriteConflictRace: 40 actions, each consumed by two racing
// callers, while a quarter of all writes meet a write conflict. Each action
// is consumed once: one caller gets 200, the other 409 already_used with the
// same consumedAt as the item; a 503 (every SDK attempt conflicted) is
// retried by its caller with its Idempotency-Key, as the Go client does.
func TestReplicatedWriteConflictRace(t *testing.T) {
	t.Parallel()
	const n = 40
	env, proxy := conflictEnv(t, faults.Rates{Conflict: 0.25})
	var mu sync.Mutex
	wins, unavailable := map[string]int{}, 0
	answers := map[string][]*testkit.Response{}
	send := func(path, body, key string) *testkit.Response {
		for {
			r, err := testkit.Send(nil, "POST", env.URL+path, body, "Idempotency-Key", key)
			if err != nil {
				t.Error(err)
				return nil
			}
			if r.Status != 503 {
				return r
			}
			mu.Lock()
			unavailable++
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for i := range n {
		id := fmt.Sprintf("race-%02d", i)
		wg.Go(func() {
			if r := send("/actions", `{"actionId":"`+id+`","userId":"u"}`, "create-"+id); r == nil || r.Status != 201 {
				t.Errorf("create %s: %v", id, r)
				return
			}
			var inner sync.WaitGroup
			for caller := range 2 {
				inner.Go(func() {
					r := send("/actions/"+id+"/consume", "", fmt.Sprintf("%s-caller-%d", id, caller))
					if r == nil {
						return
					}
					mu.Lock()
					defer mu.Unlock()
					answers[id] = append(answers[id], r)
					if r.Status == 200 {
						wins[id]++
					}
				})
			}
			inner.Wait()
		})
	}
	wg.Wait()
	for i := range n {
		id := fmt.Sprintf("race-%02d", i)
		item := testkit.Do(t, nil, "GET", env.URL+"/actions/"+id, "")
		if wins[id] != 1 || item.Str("state") != "consumed" {
			t.Fatalf("%s: %d wins, item %s", id, wins[id], item.Raw)
		}
		for _, r := range answers[id] {
			ok := (r.Status == 200 || (r.Status == 409 && r.Str("error") == "already_used")) && r.Str("consumedAt") == item.Str("consumedAt")
			if !ok {
				t.Fatalf("%s: answer %d %s does not match the item %s", id, r.Status, r.Raw, item.Raw)
			}
		}
	}
	c := proxy.Counts()
	t.Logf("%d actions raced by 2 callers each: %d UpdateItem requests, %d conflicts injected, %d retried by the SDK, %d answered 503 after 3 conflicts (then retried by the caller); every action consumed once, every answer matching its item",
		n, c.Requests, c.Conflicts, c.Conflicts-int64(unavailable), unavailable)
}
