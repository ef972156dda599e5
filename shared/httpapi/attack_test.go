package httpapi_test

// Attacks on the protected-action and idempotency promises (issue 13), each
// through the real handlers on DynamoDB Local. Every test here failed on
// the code before the fix; the comment on each says how.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
)

// TestPINBudgetUnderConcurrency: maxPinAttempts=1 and 30 concurrent guesses,
// one of them right. Exactly one guess may be evaluated (answered 200 or
// 403 invalid_pin); all others must be refused unevaluated (423 locked).
// So the right PIN wins only when its guess is the one that got the budget:
// about 1 in 30. Before the fix every guess was compared before the wrong
// ones were counted, and the right PIN won 22 of 60 trials.
//
// Bound: over n=100 trials, wins ~ Binomial(100, 1/30): mean 3.3, sd 1.8;
// P(wins > 12) < 1e-4, while the old behaviour (~37%) gives ~37 wins. The
// per-trial check (exactly one evaluated guess) is exact, not statistical.
func TestPINBudgetUnderConcurrency(t *testing.T) {
	env := testkit.NewEnv(t)
	trials, guessers := 100, 30
	if v, err := strconv.Atoi(os.Getenv("EXACTONCE_PIN_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	wins, evaluated := 0, 0
	for trial := range trials {
		id := fmt.Sprintf("b%d", trial)
		create(t, env, `{"actionId":"`+id+`","userId":"u","pin":"7391","maxPinAttempts":1,"payload":"p"}`)
		statuses := make([]int, guessers)
		right := trial % guessers
		var wg sync.WaitGroup
		for g := range guessers {
			wg.Go(func() {
				pin := fmt.Sprintf("%04d", 1000+g)
				if g == right {
					pin = "7391"
				}
				r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", `{"pin":"`+pin+`"}`)
				if err == nil {
					statuses[g] = r.Status
				}
			})
		}
		wg.Wait()
		counts := map[int]int{}
		for _, s := range statuses {
			counts[s]++
		}
		// The others are refused unevaluated: 423 while the one guess is
		// spent, or 409 already_used once the right one consumed.
		if counts[200]+counts[403] != 1 || counts[423]+counts[409] != guessers-1 || counts[409] > 0 && counts[200] == 0 {
			t.Fatalf("trial %d: statuses %v: want exactly one evaluated guess (200 or 403), the rest 423 (or 409 after a 200)", trial, counts)
		}
		wins += counts[200]
		evaluated += counts[200] + counts[403]
	}
	t.Logf("PIN budget: %d trials x %d concurrent guesses, maxPinAttempts=1: %d guesses evaluated; right PIN won %d (%.1f%%, expected ~%.1f%%)",
		trials, guessers, evaluated, wins, 100*float64(wins)/float64(trials), 100/float64(guessers))
	if limit := max(12, trials*12/100); wins > limit {
		t.Fatalf("right PIN won %d of %d trials: the budget is not a budget (bound %d)", wins, trials, limit)
	}
}

// TestPINBudgetSeveralAttempts: with k=3, at most 3 of 30 concurrent guesses
// are ever evaluated, and the count on the item is exact.
func TestPINBudgetSeveralAttempts(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for trial := range 10 {
		id := fmt.Sprintf("s%d", trial)
		create(t, env, `{"actionId":"`+id+`","userId":"u","pin":"7391","maxPinAttempts":3}`)
		var mu sync.Mutex
		counts := map[int]int{}
		var wg sync.WaitGroup
		for g := range 30 {
			wg.Go(func() {
				r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", fmt.Sprintf(`{"pin":"%04d"}`, 1000+g))
				if err == nil {
					mu.Lock()
					counts[r.Status]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if counts[403] != 3 || counts[423] != 27 {
			t.Fatalf("trial %d: %v, want 3 x 403 and 27 x 423", trial, counts)
		}
		if n := rawItem(t, env, id)["pinFailures"].(*types.AttributeValueMemberN).Value; n != "3" {
			t.Fatalf("pinFailures = %s", n)
		}
	}
}

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

// TestWrongPINLostAnswerCountsOnce: the answer to the write that counted a
// wrong PIN is lost after DynamoDB applied it; the SDK re-sends the write.
// It must count once and answer 403 with the same attemptsRemaining. Before
// the fix the re-sent ADD counted again (3 -> 1).
func TestWrongPINLostAnswerCountsOnce(t *testing.T) {
	t.Parallel()
	env, proxy := proxied(t)
	create(t, env, `{"actionId":"la","userId":"u","pin":"2468","maxPinAttempts":3,"payload":{"k":"v"}}`)
	// Lose the answer of the first write, then of the second: whichever
	// write counts the wrong PIN, its SDK retry must not count it again.
	for i, plan := range [][2]int{{0, 1}, {1, 1}} {
		proxy.PassThenDrop(plan[0], plan[1])
		w := do(t, env, "POST", "/actions/la/consume", `{"pin":"0000"}`)
		proxy.PassThenDrop(0, 0)
		if w.Status != 403 || w.Body["attemptsRemaining"] != float64(2-i) {
			t.Fatalf("wrong PIN %d with a lost answer: %d %s, want attemptsRemaining %d", i+1, w.Status, w.Raw, 2-i)
		}
	}
	if n := rawItem(t, env, "la")["pinFailures"].(*types.AttributeValueMemberN).Value; n != "2" {
		t.Fatalf("pinFailures = %s after two wrong PINs, want 2", n)
	}
	// The right PIN, losing the answer of its first write (the reservation),
	// then of its second (the consume): one consumption, the payload, and
	// the guess given back either way.
	for pass := range 2 {
		id := fmt.Sprintf("lr%d", pass)
		create(t, env, `{"actionId":"`+id+`","userId":"u","pin":"2468","maxPinAttempts":1,"payload":{"k":"v"}}`)
		proxy.PassThenDrop(pass, 1)
		ok := do(t, env, "POST", "/actions/"+id+"/consume", `{"pin":"2468"}`)
		if ok.Status != 200 || !strings.Contains(ok.Raw, `"payload":{"k":"v"}`) || ok.Body["pinAttemptsRemaining"] != 1.0 {
			t.Fatalf("right PIN, answer of write %d lost: %d %s", pass+1, ok.Status, ok.Raw)
		}
	}
	if c := proxy.Counts(); c.Dropped < 3 {
		t.Fatalf("fault proxy: %s, want at least 3 dropped", proxy)
	}
	t.Logf("fault proxy: %s", proxy)
}

// TestWrongPINKeyedResend: the same wrong PIN re-sent with the same
// Idempotency-Key is the same request: it replays the 403 with the same
// attemptsRemaining and counts nothing. Before the fix: 2, then 1.
func TestWrongPINKeyedResend(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"kr","userId":"u","pin":"2468","maxPinAttempts":3}`)
	for i := range 3 {
		r := do(t, env, "POST", "/actions/kr/consume", `{"pin":"0000"}`, "Idempotency-Key", "w-1")
		expect(t, env, r, 403, "invalid_pin", update)
		if r.Body["attemptsRemaining"] != 2.0 {
			t.Fatalf("send %d: %s, want attemptsRemaining 2", i, r.Raw)
		}
	}
	// The key's last guess locked the action: its re-send still replays 403, not 423.
	create(t, env, `{"actionId":"kl","userId":"u","pin":"2468","maxPinAttempts":1}`)
	for range 2 {
		r := do(t, env, "POST", "/actions/kl/consume", `{"pin":"0000"}`, "Idempotency-Key", "w-2")
		expect(t, env, r, 403, "invalid_pin", update)
		if r.Body["attemptsRemaining"] != 0.0 {
			t.Fatalf("locking guess re-sent: %s", r.Raw)
		}
	}
	// The same key with another PIN is not a retry: 422, and since the key's
	// first body held a PIN, comparing with it counts as a guess.
	r := do(t, env, "POST", "/actions/kr/consume", `{"pin":"2468"}`, "Idempotency-Key", "w-1")
	expect(t, env, r, 422, "idempotency_key_reused", twoUpdates)
	if r.Body["attemptsRemaining"] != 1.0 { // the guess it spent is the caller's business, as on a 403
		t.Errorf("422 that spent a guess: %s, want attemptsRemaining 1", r.Raw)
	}
	if g := do(t, env, "GET", "/actions/kr", ""); g.Body["pinAttemptsRemaining"] != 1.0 {
		t.Fatalf("after re-sends: %s", g.Raw)
	}
}

// TestReplayIsNotAPINOracle: after a keyed consume succeeded, the key's
// replay compares the request (PIN included) with the one that consumed.
// Each mismatch must spend a guess; once they are spent nothing returns the
// payload. Before the fix: unlimited 422s for wrong PINs, 200 + payload for
// the right one.
func TestReplayIsNotAPINOracle(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	const secret = "payload-7f3c"
	create(t, env, `{"actionId":"ro","userId":"u","pin":"2468","maxPinAttempts":3,"payload":"`+secret+`"}`)
	ok := do(t, env, "POST", "/actions/ro/consume", `{"pin":"2468"}`, "Idempotency-Key", "c-1")
	if ok.Status != 200 || !strings.Contains(ok.Raw, secret) {
		t.Fatalf("consume: %s", ok.Raw)
	}
	env.Counter.Take()
	for i, pin := range []string{"0001", "0002", "0003"} {
		r := do(t, env, "POST", "/actions/ro/consume", `{"pin":"`+pin+`"}`, "Idempotency-Key", "c-1")
		expect(t, env, r, 422, "idempotency_key_reused", twoUpdates)
		if r.Body["attemptsRemaining"] != float64(2-i) {
			t.Errorf("guess %d: %s, want attemptsRemaining %d", i, r.Raw, 2-i)
		}
		if strings.Contains(r.Raw, secret) {
			t.Fatalf("guess %d: %s", i, r.Raw)
		}
	}
	for _, pin := range []string{"0004", "2468"} {
		r := do(t, env, "POST", "/actions/ro/consume", `{"pin":"`+pin+`"}`, "Idempotency-Key", "c-1")
		if r.Status != 423 || strings.Contains(r.Raw, secret) {
			t.Fatalf("after the budget, pin %s: %d %s", pin, r.Status, r.Raw)
		}
	}
	// Without the key there is nothing to compare: already_used, no guess spent.
	env.Counter.Take()
	expect(t, env, do(t, env, "POST", "/actions/ro/consume", `{"pin":"2468"}`), 409, "already_used", update)

	// The same holds for a create's key: its body holds the PIN too.
	create(t, env, `{"actionId":"rc","userId":"u","pin":"1357","maxPinAttempts":1}`, "Idempotency-Key", "cr-1")
	r := do(t, env, "POST", "/actions", `{"actionId":"rc","userId":"u","pin":"0000","maxPinAttempts":1}`, "Idempotency-Key", "cr-1")
	expect(t, env, r, 422, "idempotency_key_reused", twoUpdates)
	r = do(t, env, "POST", "/actions", `{"actionId":"rc","userId":"u","pin":"1357","maxPinAttempts":1}`, "Idempotency-Key", "cr-1")
	expect(t, env, r, 423, "locked", update)
}

// TestMissingPIN: a consume without pin on a PIN action is 403 pin_required,
// names the field and counts nothing. Before the fix three empty consumes
// locked the action.
func TestMissingPIN(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"mp","userId":"u","pin":"2468"}`)
	for _, body := range []string{``, `{}`, `{"pin":""}`, `{"reason":"r"}`} {
		r := do(t, env, "POST", "/actions/mp/consume", body)
		expect(t, env, r, 403, "pin_required", update)
		if r.Str("field") != "pin" {
			t.Fatalf("%s", r.Raw)
		}
	}
	expect(t, env, do(t, env, "POST", "/actions/mp/consume", `{"pin":"2468"}`), 200, "", twoUpdates)
}

// TestNoDigestWithoutSecret reads the raw items and the logs and tries what
// an attacker with a table read (or a stream image, a backup, the logs)
// would: hash every 4-digit PIN and every 6-digit payload the way an
// unkeyed fingerprint would, and look for the result. Before the fix the
// consume fingerprint was SHA-256 of {"pin":"4821"} and fell out after
// 4,822 hashes; the logs held SHA-256 prefixes of the Idempotency-Keys.
func TestNoDigestWithoutSecret(t *testing.T) {
	env := testkit.NewEnv(t)
	const key = "order-42"
	create(t, env, `{"actionId":"d1","userId":"u","pin":"4821","payload":"583920"}`, "Idempotency-Key", key)
	if r := do(t, env, "POST", "/actions/d1/consume", `{"pin":"4821"}`, "Idempotency-Key", key+"-c"); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	do(t, env, "POST", "/actions", `{"actionId":"d2","userId":"u","payload":"583920"}`)
	do(t, env, "POST", "/actions/d2/cancel", `{"reason":"x"}`, "Idempotency-Key", key+"-x")
	do(t, env, "POST", "/keys/job-7/claim", `{"fingerprint":"f"}`, "Idempotency-Key", key+"-k")

	// Every value stored on the items, as text (hex for binary).
	var stored []string
	for _, id := range []string{"d1", "d2", "key#job-7"} {
		for name, v := range rawItem(t, env, id) {
			switch v := v.(type) {
			case *types.AttributeValueMemberS:
				stored = append(stored, v.Value)
			case *types.AttributeValueMemberB:
				stored = append(stored, hex.EncodeToString(v.Value))
			}
			stored = append(stored, name)
		}
	}
	all := strings.Join(stored, "\n") + "\n" + env.Log.String()
	for _, k := range []string{key, key + "-c", key + "-x", key + "-k"} {
		if strings.Contains(strings.Join(stored, "\n"), k+"\n") {
			t.Errorf("an Idempotency-Key is stored as sent: %q", k)
		}
		sum := sha256.Sum256([]byte(k))
		if strings.Contains(all, hex.EncodeToString(sum[:6])) {
			t.Errorf("an unkeyed hash of key %q is stored or logged", k)
		}
	}
	tries := 0
	guess := func(body string) {
		tries++
		sum := sha256.Sum256(canonical(t, body))
		if h := hex.EncodeToString(sum[:]); strings.Contains(all, h) {
			t.Fatalf("after %d hashes an unkeyed digest gives the secret away: %s", tries, body)
		}
	}
	for pin := range 10000 {
		guess(fmt.Sprintf(`{"pin":"%04d"}`, pin))
		guess(fmt.Sprintf(`{"actionId":"d1","pin":"%04d","payload":"583920","userId":"u"}`, pin))
	}
	for p := range 1000000 {
		if p%10 == 0 || p == 583920 { // every tenth payload and the real one: enough to show it
			guess(fmt.Sprintf(`{"actionId":"d2","payload":"%06d","userId":"u"}`, p))
		}
	}
	guess(`{"reason":"x"}`)
	guess(`{"fingerprint":"f"}`)
	t.Logf("%d unkeyed guesses, none found in %d stored values or the log", tries, len(stored))
}

func canonical(t *testing.T, body string) []byte {
	v := jsontext.Value(body)
	if err := v.Canonicalize(); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRequestIDReplayNeedsSameBody: a consume event re-sent with the request
// id of a committed consume (request ids are in the logs) but another body
// must not get the 200 and the payload. Before the fix the request id was
// trusted before the body.
func TestRequestIDReplayNeedsSameBody(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"ri","userId":"u","pin":"2468","payload":"s3cret"}`)
	ev := func(body string) events.APIGatewayV2HTTPRequest {
		var e events.APIGatewayV2HTTPRequest
		e.RequestContext.RequestID = "req-fixed-1"
		e.PathParameters = map[string]string{"actionId": "ri"}
		e.Headers = map[string]string{"content-type": "application/json"}
		e.Body = body
		return e
	}
	first, _ := env.API.Consume(context.Background(), ev(`{"pin":"2468"}`))
	if first.StatusCode != 200 {
		t.Fatal(first.Body)
	}
	again, _ := env.API.Consume(context.Background(), ev(`{"pin":"2468"}`))
	if again.StatusCode != 200 || again.Body != first.Body {
		t.Fatalf("the same event re-sent: %d %s", again.StatusCode, again.Body)
	}
	for _, body := range []string{`{"pin":"0000"}`, `{}`, `{"reason":"other"}`} {
		r, _ := env.API.Consume(context.Background(), ev(body))
		if r.StatusCode == 200 || strings.Contains(r.Body, "s3cret") {
			t.Fatalf("request id with body %s: %d %s", body, r.StatusCode, r.Body)
		}
	}
}

// TestClaimTokenOnlyForSameRequest: a claim with the holder's
// Idempotency-Key but another body must not get the live token. Before the
// fix it got 201 with the first holder's token.
func TestClaimTokenOnlyForSameRequest(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	first := do(t, env, "POST", "/keys/job-1/claim", `{"fingerprint":"f","leaseSeconds":60}`, "Idempotency-Key", "cl-1")
	if first.Status != 201 || first.Str("token") == "" {
		t.Fatal(first.Raw)
	}
	other := do(t, env, "POST", "/keys/job-1/claim", `{"fingerprint":"f","leaseSeconds":30}`, "Idempotency-Key", "cl-1")
	if other.Status != 409 || other.Str("error") != "in_progress" || strings.Contains(other.Raw, first.Str("token")) {
		t.Fatalf("same key, other body: %d %s", other.Status, other.Raw)
	}
	retry := do(t, env, "POST", "/keys/job-1/claim", `{"fingerprint":"f","leaseSeconds":60}`, "Idempotency-Key", "cl-1")
	if retry.Status != 201 || retry.Str("token") != first.Str("token") || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the holder's own retry: %d %s", retry.Status, retry.Raw)
	}
}

// TestEdges: inputs that used to be accepted or answered wrongly.
func TestEdges(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for _, tc := range []struct{ body, field string }{
		{`{"actionId":".","userId":"u"}`, "actionId"},
		{`{"actionId":"..","userId":"u"}`, "actionId"},
		{`{"userId":"u","activeAt":"2026-12-01T00:00:00+24:00"}`, "activeAt"},
		{`{"userId":"u","expiresAt":"2099-12-01T00:00:00-24:00"}`, "expiresAt"},
		{`{"userId":"u","activeAt":"2020-01-01T00:00:00Z"}`, "activeAt"},
		{`{"userId":"u","activeAt":"` + time.Now().Add(366*24*time.Hour).UTC().Format(time.RFC3339) + `"}`, "activeAt"},
	} {
		r := do(t, env, "POST", "/actions", tc.body)
		expect(t, env, r, 400, "invalid_request", none)
		if r.Str("field") != tc.field {
			t.Errorf("%s: field %q, want %q (%s)", tc.body, r.Str("field"), tc.field, r.Raw)
		}
	}
	for _, id := range []string{".", ".."} {
		var e events.APIGatewayV2HTTPRequest
		e.PathParameters = map[string]string{"actionId": id, "key": id}
		for name, h := range map[string]func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error){
			"consume": env.API.Consume, "get": env.API.Get, "claim": env.API.Claim} {
			if r, _ := h(context.Background(), e); r.StatusCode != 400 {
				t.Errorf("%s %q: %d %s", name, id, r.StatusCode, r.Body)
			}
		}
	}

	// A /keys response as deep as a payload may be, not deeper.
	claim := do(t, env, "POST", "/keys/deep/claim", `{"fingerprint":"f"}`)
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	env.Counter.Take()
	r := do(t, env, "POST", "/keys/deep/complete", `{"token":"`+claim.Str("token")+`","response":`+deep+`}`)
	expect(t, env, r, 400, "invalid_request", none)
	if r.Str("field") != "response" {
		t.Fatal(r.Raw)
	}

	// Empty JSON values are values: replayed exactly as stored.
	for i, v := range []string{`{}`, `[]`, `""`, `null`, `0`, `false`} {
		id := fmt.Sprintf("e%d", i)
		create(t, env, `{"actionId":"`+id+`","userId":"u","payload":`+v+`}`)
		c := do(t, env, "POST", "/actions/"+id+"/consume", ``, "Idempotency-Key", "k"+id)
		again := do(t, env, "POST", "/actions/"+id+"/consume", ``, "Idempotency-Key", "k"+id)
		for _, got := range []*testkit.Response{c, again} {
			if got.Status != 200 || !strings.Contains(got.Raw, `"payload":`+v) {
				t.Errorf("payload %s: %d %s", v, got.Status, got.Raw)
			}
		}
		k := do(t, env, "POST", "/keys/"+id+"/claim", `{"fingerprint":"f"}`)
		do(t, env, "POST", "/keys/"+id+"/complete", `{"token":"`+k.Str("token")+`","response":`+v+`}`)
		replay := do(t, env, "POST", "/keys/"+id+"/claim", `{"fingerprint":"f"}`)
		if replay.Status != 200 || !strings.Contains(replay.Raw, `"response":`+v) {
			t.Errorf("key response %s: %d %s", v, replay.Status, replay.Raw)
		}
	}

	// A create retried with its key after its expiresAt has passed replays its 201.
	body := `{"userId":"u","expiresAt":"` + time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano) + `"}`
	first := do(t, env, "POST", "/actions", body, "Idempotency-Key", "late-1")
	env.Shift(time.Hour)
	env.Counter.Take()
	late := do(t, env, "POST", "/actions", body, "Idempotency-Key", "late-1")
	expect(t, env, late, 201, "", get)
	if late.Raw != first.Raw || late.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("late retry: %s, first: %s", late.Raw, first.Raw)
	}
	// Without a matching create it is still the 400 it always was.
	r = do(t, env, "POST", "/actions", body, "Idempotency-Key", "late-2")
	expect(t, env, r, 400, "invalid_request", get)
	r = do(t, env, "POST", "/actions", body)
	expect(t, env, r, 400, "invalid_request", none)
}

// TestLocalServerRefusesCrossSite: a web page the developer has open can
// POST to the local server without a preflight; what a browser marks as
// cross-site is refused, what curl sends passes.
func TestLocalServerRefusesCrossSite(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	host := strings.TrimPrefix(env.URL, "http://")
	for _, tc := range []struct {
		headers []string
		status  int
	}{
		{[]string{"Sec-Fetch-Site", "cross-site"}, 403},
		{[]string{"Origin", "https://evil.example"}, 403},
		{[]string{"Origin", "null"}, 403},
		{[]string{"Origin", "http://localhost:3000"}, 403},
		{[]string{"Origin", "http://" + host, "Sec-Fetch-Site", "same-origin"}, 201},
		{nil, 201},
	} {
		r := do(t, env, "POST", "/actions", `{"userId":"u"}`, tc.headers...)
		if r.Status != tc.status {
			t.Errorf("%v: %d %s, want %d", tc.headers, r.Status, r.Raw, tc.status)
		}
	}
	if n := env.Counter.Take()["UpdateItem"]; n != 2 {
		t.Fatalf("%d writes, want 2 (refused requests write nothing)", n)
	}
}

// TestIdempotencyKeyStructuredField: the IETF draft's quoted form and the
// bare form are the same key.
func TestIdempotencyKeyStructuredField(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	first := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", `"8e03978e-40d5"`)
	bare := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", `8e03978e-40d5`)
	if first.Status != 201 || bare.Status != 201 || bare.Str("actionId") != first.Str("actionId") || bare.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("quoted then bare: %s / %s", first.Raw, bare.Raw)
	}
	esc := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", `"a\"b\\c"`)
	same := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", `a"b\c`)
	if esc.Status != 201 || same.Str("actionId") != esc.Str("actionId") {
		t.Fatalf("escapes: %s / %s", esc.Raw, same.Raw)
	}
	env.Counter.Take()
	for _, bad := range []string{`"open`, `""`, `"a"b"`, `"a\x"`} {
		r := do(t, env, "POST", "/actions", `{"userId":"u"}`, "Idempotency-Key", bad)
		expect(t, env, r, 400, "invalid_request", none)
		if r.Str("field") != "Idempotency-Key" {
			t.Fatal(r.Raw)
		}
	}
}

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
