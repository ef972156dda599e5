package httpapi_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
)

func claim(t *testing.T, env *testkit.Env, key, body string, headers ...string) *testkit.Response {
	t.Helper()
	return do(t, env, "POST", "/keys/"+key+"/claim", body, headers...)
}

// TestKeyLifecycle walks claim → in progress → complete → replay, with every
// conflict on the way, one DynamoDB request per call.
func TestKeyLifecycle(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	first := claim(t, env, "pay-1", `{"fingerprint":"sha256:aa","leaseSeconds":30}`)
	expect(t, env, first, 201, "", update)
	token := first.Str("token")
	if first.Str("state") != "in_progress" || len(token) != 32 || first.Body["attempts"] != 1.0 || first.Str("leaseExpiresAt") == "" {
		t.Fatalf("claim: %s", first.Raw)
	}

	busy := claim(t, env, "pay-1", `{"fingerprint":"sha256:aa"}`)
	expect(t, env, busy, 409, "in_progress", update)
	if ra := busy.Header.Get("Retry-After"); ra == "" || ra == "0" || busy.Str("leaseExpiresAt") != first.Str("leaseExpiresAt") || busy.Str("token") != "" {
		t.Fatalf("in progress: Retry-After %q %s", ra, busy.Raw)
	}
	expect(t, env, claim(t, env, "pay-1", `{"fingerprint":"sha256:bb"}`), 422, "fingerprint_mismatch", update)

	got := do(t, env, "GET", "/keys/pay-1", "")
	expect(t, env, got, 200, "", get)
	if got.Str("state") != "in_progress" || strings.Contains(got.Raw, token) || strings.Contains(got.Raw, "sha256:aa") {
		t.Fatalf("get shows %s", got.Raw)
	}

	other := strings.Repeat("0", 32)
	expect(t, env, do(t, env, "POST", "/keys/pay-1/complete", `{"token":"`+other+`","response":1}`), 409, "lease_lost", update)
	done := do(t, env, "POST", "/keys/pay-1/complete", `{"token":"`+token+`","response":{"charge": "ch_1", "amount": 500}}`)
	expect(t, env, done, 200, "", update)
	if done.Str("state") != "completed" || done.Str("completedAt") == "" || done.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("complete: %s", done.Raw)
	}
	again := do(t, env, "POST", "/keys/pay-1/complete", `{"token":"`+token+`","response":{"charge":"ch_2"}}`)
	expect(t, env, again, 200, "", update)
	if again.Header.Get("Idempotent-Replayed") != "true" || again.Str("completedAt") != done.Str("completedAt") {
		t.Fatalf("complete again: %s", again.Raw)
	}

	for range 2 { // every later claim replays the stored response
		r := claim(t, env, "pay-1", `{"fingerprint":"sha256:aa"}`)
		expect(t, env, r, 200, "", update)
		if r.Str("state") != "completed" || r.Str("token") != "" || !strings.Contains(r.Raw, `"response":{"amount":500,"charge":"ch_1"}`) &&
			!strings.Contains(r.Raw, `"response":{"charge":"ch_1","amount":500}`) {
			t.Fatalf("replay: %s", r.Raw)
		}
	}
	expect(t, env, claim(t, env, "pay-1", `{"fingerprint":"sha256:bb"}`), 422, "fingerprint_mismatch", update)
	expect(t, env, do(t, env, "POST", "/keys/pay-1/release", `{"token":"`+token+`"}`), 409, "key_completed", update)
	if g := do(t, env, "GET", "/keys/pay-1", ""); g.Str("state") != "completed" || strings.Contains(g.Raw, "ch_1") {
		t.Fatalf("get after complete: %s", g.Raw)
	}
	// The log has one line per call with a hash of the key, never the key,
	// the token, the fingerprint or the stored response.
	logs := env.Log.String()
	for _, secret := range []string{"pay-1", token, "sha256:aa", "ch_1"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the log holds %q", secret)
		}
	}
	if n := strings.Count(logs, `"keyHash":"`); n != 12 { // every call above
		t.Fatalf("%d request lines carry keyHash", n)
	}
}

// TestKeyRelease: a released key is claimable at once with a new token, the
// failure is counted, and the released token is dead.
func TestKeyRelease(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	token := claim(t, env, "k", `{"fingerprint":"f"}`).Str("token")
	env.Counter.Take()
	rel := do(t, env, "POST", "/keys/k/release", `{"token":"`+token+`","error":"card declined"}`)
	expect(t, env, rel, 200, "", update)
	if rel.Str("state") != "failed" || rel.Body["failures"] != 1.0 || rel.Str("lastError") != "card declined" {
		t.Fatalf("release: %s", rel.Raw)
	}
	again := do(t, env, "POST", "/keys/k/release", `{"token":"`+token+`","error":"card declined"}`)
	expect(t, env, again, 200, "", update)
	if again.Header.Get("Idempotent-Replayed") != "true" || again.Body["failures"] != 1.0 {
		t.Fatalf("release again: %s", again.Raw)
	}
	next := claim(t, env, "k", `{"fingerprint":"f"}`)
	expect(t, env, next, 201, "", update)
	if next.Str("token") == token || next.Body["attempts"] != 2.0 || next.Body["failures"] != 1.0 {
		t.Fatalf("claim after release: %s", next.Raw)
	}
	expect(t, env, do(t, env, "POST", "/keys/k/complete", `{"token":"`+token+`","response":"x"}`), 409, "lease_lost", update)
	// Its release, re-sent, still answers as it did (it applied), with the
	// key as it is now: the new holder's, untouched.
	resent := do(t, env, "POST", "/keys/k/release", `{"token":"`+token+`"}`)
	expect(t, env, resent, 200, "", update)
	if resent.Header.Get("Idempotent-Replayed") != "true" || resent.Str("state") != "in_progress" || resent.Body["failures"] != 1.0 || resent.Str("token") != "" {
		t.Fatalf("release re-sent after another claim: %s", resent.Raw)
	}
	expect(t, env, do(t, env, "POST", "/keys/k/complete", `{"token":"`+next.Str("token")+`","response":"ok"}`), 200, "", update)
}

// TestKeyReleaseAnswerLost: a release whose answer DynamoDB's connection
// lost applied; another caller claims the key before the SDK re-sends it
// (a released key is claimable at once), and the re-send answers 200
// replayed, not 409 lease_lost as if the release had never applied (before
// the fix: the claim removed the released token the refusal was explained
// by). The same when the other caller has completed the key meanwhile
// (before: 409 key_completed).
func TestKeyReleaseAnswerLost(t *testing.T) {
	t.Parallel()
	for name, completes := range map[string]bool{"claimed meanwhile": false, "claimed and completed meanwhile": true} {
		t.Run(name, func(t *testing.T) { releaseAnswerLost(t, completes) })
	}
}

func releaseAnswerLost(t *testing.T, completes bool) {
	var env *testkit.Env
	var armed atomic.Int32 // the UpdateItem before which the other caller acts
	other := make(chan *testkit.Response, 2)
	env, proxy := hooked(t, func(n int32) {
		if n != armed.Load() {
			return
		}
		// In the proxy's goroutine: errors surface through the channel.
		c, err := testkit.Send(client, "POST", env.URL+"/keys/k/claim", `{"fingerprint":"f"}`)
		if err != nil {
			c = &testkit.Response{Raw: err.Error()}
		}
		other <- c
		d := &testkit.Response{}
		if completes {
			if d, err = testkit.Send(client, "POST", env.URL+"/keys/k/complete", `{"token":"`+c.Str("token")+`","response":"ok"}`); err != nil {
				d = &testkit.Response{Raw: err.Error()}
			}
		}
		other <- d
	})
	first := claim(t, env, "k", `{"fingerprint":"f"}`) // UpdateItem 1
	token := first.Str("token")
	if first.Status != 201 {
		t.Fatalf("claim: %d %s", first.Status, first.Raw)
	}
	// The release (2) applies and its answer is lost; before the SDK's
	// re-send (3) goes out, the other caller claims (4) and completes (5).
	armed.Store(3)
	proxy.PassThenDrop(0, 1)
	rel := do(t, env, "POST", "/keys/k/release", `{"token":"`+token+`","error":"declined"}`)
	if proxy.Counts().Dropped != 1 {
		t.Fatalf("fault proxy: %s, want the release's answer dropped (release: %d %s)", proxy, rel.Status, rel.Raw)
	}
	c, d := <-other, <-other
	if c.Status != 201 || completes && d.Status != 200 {
		t.Fatalf("the other caller: claim %d %s, complete %d %s", c.Status, c.Raw, d.Status, d.Raw)
	}
	want := map[bool]string{false: "in_progress", true: "completed"}[completes]
	if rel.Status != 200 || rel.Header.Get("Idempotent-Replayed") != "true" || rel.Str("state") != want ||
		rel.Body["failures"] != 1.0 || rel.Str("lastError") != "declined" {
		t.Fatalf("the release whose answer was lost (other caller completes: %v): %d %s, want 200 replayed, %s", completes, rel.Status, rel.Raw, want)
	}
	if completes {
		return
	}
	if r := do(t, env, "POST", "/keys/k/complete", `{"token":"`+c.Str("token")+`","response":"ok"}`); r.Status != 200 {
		t.Fatalf("the other caller's complete after the re-sent release: %d %s", r.Status, r.Raw)
	}
}

// TestKeyTakeover: after a holder's lease lapses the next claim takes over
// with a new token, and the stale holder can neither complete nor release.
func TestKeyTakeover(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	stale := claim(t, env, "job", `{"fingerprint":"f","leaseSeconds":5}`).Str("token")
	env.Counter.Take()
	env.Shift(6 * time.Second)
	if g := do(t, env, "GET", "/keys/job", ""); g.Str("state") != "lease_expired" {
		t.Fatalf("get after the lease: %s", g.Raw)
	}
	env.Counter.Take()
	fresh := claim(t, env, "job", `{"fingerprint":"f","leaseSeconds":5}`)
	expect(t, env, fresh, 201, "", update)
	if fresh.Str("token") == stale {
		t.Fatal("takeover kept the old token")
	}
	expect(t, env, do(t, env, "POST", "/keys/job/complete", `{"token":"`+stale+`","response":"late"}`), 409, "lease_lost", update)
	expect(t, env, do(t, env, "POST", "/keys/job/release", `{"token":"`+stale+`"}`), 409, "lease_lost", update)
	expect(t, env, do(t, env, "POST", "/keys/job/complete", `{"token":"`+fresh.Str("token")+`","response":"on time"}`), 200, "", update)
	if r := claim(t, env, "job", `{"fingerprint":"f"}`); r.Status != 200 || !strings.Contains(r.Raw, `"response":"on time"`) {
		t.Fatalf("replay: %s", r.Raw)
	}
}

// A claim retried with its Idempotency-Key (its response was lost) gets its
// own lease back rather than 409; another caller still gets 409.
func TestKeyClaimRetry(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	first := claim(t, env, "r", `{"fingerprint":"f"}`, "Idempotency-Key", "attempt-1")
	env.Counter.Take()
	retry := claim(t, env, "r", `{"fingerprint":"f"}`, "Idempotency-Key", "attempt-1")
	expect(t, env, retry, 201, "", update)
	if retry.Str("token") != first.Str("token") || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %s", retry.Raw)
	}
	expect(t, env, claim(t, env, "r", `{"fingerprint":"f"}`, "Idempotency-Key", "attempt-2"), 409, "in_progress", update)
	expect(t, env, claim(t, env, "r", `{"fingerprint":"f"}`), 409, "in_progress", update)
}

// TestKeyRetention: past its retention a key is gone: 404, and claimable
// anew even with other parameters.
func TestKeyRetention(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	token := claim(t, env, "old", `{"fingerprint":"f"}`).Str("token")
	do(t, env, "POST", "/keys/old/complete", `{"token":"`+token+`","response":1}`)
	env.Counter.Take()
	env.Shift(25 * time.Hour)
	expect(t, env, do(t, env, "GET", "/keys/old", ""), 404, "key_not_found", get)
	r := claim(t, env, "old", `{"fingerprint":"g"}`)
	expect(t, env, r, 201, "", map[string]int{"UpdateItem": 2}) // the expired record is replaced (TestKeyFreshAfterRetention)
	if r.Str("completedAt") != "" || r.Str("response") != "" {
		t.Fatalf("a recycled key kept its old answer: %s", r.Raw)
	}
}

// TestKeyFreshAfterRetention (issue 21, item 14): a key claimed anew after
// its retention starts a fresh record: no earlier attempts, failures,
// timestamps or lastError (the old item may outlive its TTL attribute:
// DynamoDB deletes expired items within days). That claim costs two
// conditional writes (the first one's refusal shows the old item
// expired); every other claim stays one.
func TestKeyFreshAfterRetention(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for range 2 {
		token := claim(t, env, "life", `{"fingerprint":"f"}`).Str("token")
		if r := do(t, env, "POST", "/keys/life/release", `{"token":"`+token+`","error":"card declined"}`); r.Status != 200 {
			t.Fatalf("release: %s", r.Raw)
		}
	}
	old := do(t, env, "GET", "/keys/life", "")
	if old.Body["attempts"] != 2.0 || old.Body["failures"] != 2.0 || old.Str("lastError") == "" {
		t.Fatalf("before its retention: %s", old.Raw)
	}
	env.Counter.Take()
	env.Shift(25 * time.Hour)
	r := claim(t, env, "life", `{"fingerprint":"f"}`)
	if r.Body["attempts"] != 1.0 || r.Body["failures"] != 0.0 || r.Str("lastError") != "" || r.Str("releasedAt") != "" ||
		r.Str("createdAt") != r.Str("claimedAt") || r.Str("createdAt") == old.Str("createdAt") {
		t.Fatalf("a key claimed anew after its retention kept its past: %s (before: %s)", r.Raw, old.Raw)
	}
	expect(t, env, r, 201, "", map[string]int{"UpdateItem": 2})
	g := do(t, env, "GET", "/keys/life", "")
	if g.Body["attempts"] != 1.0 || g.Body["failures"] != 0.0 || g.Str("lastError") != "" || g.Str("createdAt") != r.Str("createdAt") {
		t.Fatalf("GET after the fresh claim: %s", g.Raw)
	}
	// Another claim now meets the live lease (one write), not another life.
	env.Counter.Take()
	again := claim(t, env, "life", `{"fingerprint":"f"}`)
	expect(t, env, again, 409, "in_progress", update)
}

// TestKeyClaimRace: 200 concurrent claimers of one key, one token.
func TestKeyClaimRace(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	const n = 200
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	tokens := make(chan string, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := testkit.Send(client, "POST", env.URL+"/keys/race/claim", `{"fingerprint":"f"}`)
			if err != nil {
				t.Error(err)
				return
			}
			statuses <- r.Status
			if r.Status == 201 {
				tokens <- r.Str("token")
			} else if r.Str("error") != "in_progress" {
				t.Errorf("loser got %d %s", r.Status, r.Raw)
			}
		}()
	}
	wg.Wait()
	close(statuses)
	close(tokens)
	won := 0
	for s := range statuses {
		if s == 201 {
			won++
		}
	}
	if won != 1 || len(tokens) != 1 {
		t.Fatalf("%d claimers won, want 1", won)
	}
	if got := env.Counter.Take(); got["UpdateItem"] != n || len(got) != 1 {
		t.Fatalf("DynamoDB requests = %v, want %d UpdateItem", got, n)
	}
}

func TestKeyBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	big := `{"token":"` + strings.Repeat("a", 32) + `","response":"` + strings.Repeat("x", 65536) + `"}`
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/keys/a%20b/claim", `{"fingerprint":"f"}`, "key"},
		{"POST", "/keys/" + strings.Repeat("k", 256) + "/claim", `{"fingerprint":"f"}`, "key"},
		{"POST", "/keys/k/claim", `{}`, "fingerprint"},
		{"POST", "/keys/k/claim", ``, "body"},
		{"POST", "/keys/k/claim", `{"fingerprint":"f","leaseSeconds":0}`, "leaseSeconds"},
		{"POST", "/keys/k/claim", `{"fingerprint":"f","leaseSeconds":3601}`, "leaseSeconds"},
		{"POST", "/keys/k/claim", `{"fingerprint":"f","lease":5}`, "lease"},
		{"POST", "/keys/k/complete", `{"response":1}`, "token"},
		{"POST", "/keys/k/complete", `{"token":"nope","response":1}`, "token"},
		{"POST", "/keys/k/complete", `{"token":"` + strings.Repeat("a", 32) + `"}`, "response"},
		{"POST", "/keys/k/complete", big, "response"},
		{"POST", "/keys/k/release", `{"token":"` + strings.Repeat("a", 32) + `","error":"bad\u0000"}`, "error"},
		{"GET", "/keys/a%20b", ``, "key"},
	} {
		r := do(t, env, c.method, c.path, c.body)
		if r.Status != 400 || r.Str("field") != c.field {
			t.Errorf("%s %s %.60s: got %d %s, want 400 naming %s", c.method, c.path, c.body, r.Status, r.Raw, c.field)
		}
		if got := env.Counter.Take(); len(got) != 0 {
			t.Errorf("%s %s: bad input cost %v", c.method, c.path, got)
		}
	}
	huge := `{"token":"` + strings.Repeat("a", 32) + `","response":"` + strings.Repeat("x", 70<<10) + `"}`
	expect(t, env, do(t, env, "POST", "/keys/k/complete", huge), 413, "request_too_large", none)
	expect(t, env, do(t, env, "GET", "/keys/missing", ""), 404, "key_not_found", get)
	expect(t, env, do(t, env, "POST", "/keys/missing/complete", `{"token":"`+strings.Repeat("a", 32)+`","response":1}`), 404, "key_not_found", update)
}
