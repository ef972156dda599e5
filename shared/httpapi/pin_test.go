package httpapi_test

// The PIN's guess budget (maxPinAttempts): what counts as a guess, that
// each is counted once under concurrency, lost answers and keyed re-sends,
// and that no replay answers a guess the budget did not allow. Through the
// real handlers on DynamoDB Local.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
)

func TestPIN(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	r := create(t, env, `{"actionId":"p","userId":"u","pin":"PIN-2468-right","maxPinAttempts":3}`)
	if r.Body["pinProtected"] != true || r.Body["pinAttemptsRemaining"] != 3.0 || strings.Contains(r.Raw, "PIN-2468-right") {
		t.Fatalf("create: %s", r.Raw)
	}
	// A wrong PIN: its guess is reserved (counted) by one write, then
	// compared: nothing more to write.
	w := do(t, env, "POST", "/actions/p/consume", `{"pin":"PIN-0000-wrong"}`)
	expect(t, env, w, 403, "invalid_pin", update)
	if w.Body["attemptsRemaining"] != 2.0 {
		t.Fatalf("wrong pin: %s", w.Raw)
	}
	// A missing PIN counts nothing and says which field is missing.
	for range 5 {
		m := do(t, env, "POST", "/actions/p/consume", ``)
		expect(t, env, m, 403, "pin_required", update)
		if m.Str("field") != "pin" || m.Body["attemptsRemaining"] != nil {
			t.Fatalf("missing pin: %s", m.Raw)
		}
	}
	if g := do(t, env, "GET", "/actions/p", ""); g.Body["pinAttemptsRemaining"] != 2.0 {
		t.Fatalf("missing PINs were counted: %s", g.Raw)
	}
	env.Counter.Take()
	// The right PIN: reserve a guess, compare, consume (giving the guess back).
	ok := do(t, env, "POST", "/actions/p/consume", `{"pin":"PIN-2468-right"}`)
	expect(t, env, ok, 200, "", twoUpdates)
	if ok.Body["pinAttemptsRemaining"] != 2.0 {
		t.Fatalf("right pin: %s", ok.Raw)
	}
	expect(t, env, do(t, env, "POST", "/actions/p/consume", `{"pin":"PIN-2468-right"}`), 409, "already_used", update)
	expect(t, env, do(t, env, "POST", "/actions/p/consume", `{"pin":"1111"}`), 409, "already_used", update)

	raw := rawItem(t, env, "p")
	for k, v := range raw {
		if strings.Contains(fmt.Sprint(v), "PIN-2468-right") {
			t.Fatalf("attribute %s holds the PIN", k)
		}
	}
	if strings.Contains(env.Log.String(), "PIN-2468-right") || strings.Contains(env.Log.String(), "PIN-0000-wrong") {
		t.Fatal("a PIN reached the logs")
	}
}

func TestPINLockout(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"l","userId":"u","pin":"2468","maxPinAttempts":2}`)
	expect(t, env, do(t, env, "POST", "/actions/l/consume", `{"pin":"1111"}`), 403, "invalid_pin", update)
	last := do(t, env, "POST", "/actions/l/consume", `{"pin":"2222"}`)
	expect(t, env, last, 403, "invalid_pin", update)
	if last.Body["attemptsRemaining"] != 0.0 {
		t.Fatalf("locking attempt: %s", last.Raw)
	}
	for _, pin := range []string{"2468", "3333"} {
		r := do(t, env, "POST", "/actions/l/consume", `{"pin":"`+pin+`"}`)
		expect(t, env, r, 423, "locked", update)
		if r.Str("lockedAt") == "" {
			t.Fatalf("no lockedAt: %s", r.Raw)
		}
	}
	g := do(t, env, "GET", "/actions/l", "")
	if g.Body["pinAttemptsRemaining"] != 0.0 || g.Str("lockedAt") == "" || g.Str("state") != "active" {
		t.Fatalf("GET locked: %s", g.Raw)
	}
	env.Counter.Take()
	// A locked action can still be canceled.
	expect(t, env, do(t, env, "POST", "/actions/l/cancel", ``), 200, "", update)
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

// TestConsumePINRejectsImpossiblePIN (issue 21, item 12): a PIN that can never match
// (shorter than 4 or longer than 32 characters, counted as characters) is a
// 400 naming pin, with nothing written and no attempt spent. Before the fix
// "123" spent a guess (403 invalid_pin) and 33 two-byte characters did too.
func TestConsumePINRejectsImpossiblePIN(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"ip","userId":"u","pin":"2468","maxPinAttempts":3}`)
	for _, pin := range []string{"123", strings.Repeat("é", 33), strings.Repeat("7", 33)} {
		r := do(t, env, "POST", "/actions/ip/consume", `{"pin":"`+pin+`"}`)
		expect(t, env, r, 400, "invalid_request", none)
		if r.Str("field") != "pin" {
			t.Fatalf("pin %q: %s", pin, r.Raw)
		}
	}
	if g := do(t, env, "GET", "/actions/ip", ""); g.Body["pinAttemptsRemaining"] != 3.0 {
		t.Fatalf("attempts spent by impossible PINs: %s", g.Raw)
	}
	// 32 characters of four bytes each are a PIN: counted as characters.
	long := strings.Repeat("😀", 32)
	create(t, env, `{"actionId":"ip32","userId":"u","pin":"`+long+`"}`)
	if r := do(t, env, "POST", "/actions/ip32/consume", `{"pin":"`+long+`"}`); r.Status != 200 {
		t.Fatalf("32-character PIN: %d %s", r.Status, r.Raw)
	}
}

// TestConcurrentWrongPINs: 20 parallel wrong PINs count exactly up to the
// limit: none lost, none past it.
func TestConcurrentWrongPINs(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for round := range 5 {
		id := fmt.Sprintf("c%d", round)
		create(t, env, `{"actionId":"`+id+`","userId":"u","pin":"2468","maxPinAttempts":5}`)
		var wg sync.WaitGroup
		statuses := make([]int, 20)
		for g := range 20 {
			wg.Go(func() {
				r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", fmt.Sprintf(`{"pin":"bad%d"}`, g))
				if err == nil {
					statuses[g] = r.Status
				}
			})
		}
		wg.Wait()
		if n := env.Counter.Take()["UpdateItem"]; n > 40 {
			t.Fatalf("round %d: %d UpdateItems for 20 wrong PINs, want at most 2 each", round, n)
		}
		counts := map[int]int{}
		for _, s := range statuses {
			counts[s]++
		}
		if counts[403] != 5 || counts[423] != 15 {
			t.Fatalf("round %d: statuses %v, want 5x403 and 15x423", round, counts)
		}
		item := rawItem(t, env, id)
		if n := item["pinFailures"].(*types.AttributeValueMemberN).Value; n != "5" {
			t.Fatalf("pinFailures = %s, want 5", n)
		}
		if l := item["pinFailedAt"].(*types.AttributeValueMemberL).Value; len(l) != 5 {
			t.Fatalf("pinFailedAt has %d entries", len(l))
		}
		expect(t, env, do(t, env, "POST", "/actions/"+id+"/consume", `{"pin":"2468"}`), 423, "locked", nil)
	}
}

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
	t.Parallel()
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

// TestReusedKeyGuessLostAnswerCountsOnce (issue 21, item 10): a reused key on a PIN
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

// TestReusedKeyGuessesUnderFaults (issue 21, item 10): three other bodies under one
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

// TestRightPINReplayIsExact: docs/http-api.md, "What a keyed re-send is
// answered with": "a success replays exactly (status, body, payload)". A
// consume's 200 carries pinAttemptsRemaining; guesses counted on the action
// after it consumed (a reused key: the consumer's own, or the create's) must
// not change the replayed body. The replay answered the count as it is
// now (2), not as the consume did (3). Once they reach the limit, the
// replay is 423, as documented (it compares with a body holding the PIN).
func TestRightPINReplayIsExact(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"rx","userId":"u","pin":"2468","maxPinAttempts":3,"payload":"secret-p"}`, "Idempotency-Key", "c-rx")
	ok := do(t, env, "POST", "/actions/rx/consume", `{"pin":"2468"}`, "Idempotency-Key", "k-rx")
	if ok.Status != 200 || !strings.Contains(ok.Raw, "secret-p") {
		t.Fatalf("consume: %d %s", ok.Status, ok.Raw)
	}
	strip := func(raw string) string { // the request id differs per call
		i := strings.Index(raw, `"requestId"`)
		if i < 0 {
			return raw
		}
		return raw[:i]
	}
	first := strip(ok.Raw)
	// The creator re-sends its create with other bodies: each a guess spent.
	for i, pin := range []string{"1111", "2222", "3333"} {
		r := do(t, env, "POST", "/actions", `{"actionId":"rx","userId":"u","pin":"`+pin+`","maxPinAttempts":3,"payload":"secret-p"}`, "Idempotency-Key", "c-rx")
		if r.Status != 422 {
			t.Fatalf("create key reused: %d %s", r.Status, r.Raw)
		}
		again := do(t, env, "POST", "/actions/rx/consume", `{"pin":"2468"}`, "Idempotency-Key", "k-rx")
		switch {
		case i < 2 && (again.Status != 200 || strip(again.Raw) != first):
			t.Fatalf("after %d guesses, a keyed re-send of the consume that succeeded does not replay exactly:\nfirst  %s\nreplay %s", i+1, first, again.Raw)
		case i == 2 && (again.Status != 423 || strings.Contains(again.Raw, "secret-p")):
			// The re-send is compared with a stored body holding the PIN:
			// once the attempts are spent no replay gives the payload.
			t.Fatalf("the attempts spent, a replay: %d %s", again.Status, again.Raw)
		}
	}
}

// TestUnreadablePINRecordLetsNothingThrough: an item whose PIN material
// (its hash, its count, its limit) cannot be read never lets a guess
// through and never gives the payload, with the right PIN or none.
func TestUnreadablePINRecordLetsNothingThrough(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	S := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	B := func(v string) types.AttributeValue { return &types.AttributeValueMemberB{Value: []byte(v)} }
	cases := []struct {
		name, attr string
		v          types.AttributeValue
	}{
		{"hash-S", "pinHash", S("garbage")},
		{"hash-B", "pinHash", B("0123456789abcdef0123456789abcdef")},
		{"hash-empty", "pinHash", B("")},
		{"fail-S", "pinFailures", S("0")},
		{"fail-gone", "pinFailures", nil},
		{"max-gone", "maxPinAttempts", nil},
		{"max-S", "maxPinAttempts", S("3")},
	}
	for i, c := range cases {
		id := fmt.Sprintf("cr%d", i)
		create(t, env, `{"actionId":"`+id+`","userId":"u","pin":"2468","maxPinAttempts":3,"payload":"sec-`+id+`"}`)
		setAttr(t, env, id, c.attr, c.v)
		for _, body := range []string{`{"pin":"2468"}`, `{"pin":"1111"}`, `{"pin":"2468"}`} {
			r := do(t, env, "POST", "/actions/"+id+"/consume", body)
			if r.Status == 200 || strings.Contains(r.Raw, "sec-"+id) {
				t.Errorf("%s: corrupt PIN record let %s through: %s", c.name, body, r.Raw)
			}
		}
		r := do(t, env, "POST", "/actions/"+id+"/consume", ``)
		if r.Status == 200 {
			t.Errorf("%s: consumed without a PIN", c.name)
		}
	}
}

// TestUnreadableLockStampIsAnError: a locked action answers 423 with
// lockedAt, the time of the guess that locked it. With that stamp
// unreadable the item is malformed, like any unreadable field (500, never
// a half-read action): it answered 423 without lockedAt, and GET showed a
// lock without its time.
func TestUnreadableLockStampIsAnError(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"lk","userId":"u","pin":"2468","maxPinAttempts":1}`)
	expect(t, env, do(t, env, "POST", "/actions/lk/consume", `{"pin":"1111"}`), 403, "invalid_pin", nil)
	if r := do(t, env, "POST", "/actions/lk/consume", `{"pin":"2468"}`); r.Status != 423 || r.Str("lockedAt") == "" {
		t.Fatalf("locked: %d %s", r.Status, r.Raw)
	}
	setAttr(t, env, "lk", "pinFailedAt", &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "not-a-time"}}})
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/actions/lk/consume", `{"pin":"2468"}`},
		{"GET", "/actions/lk", ""},
	} {
		if r := do(t, env, c.method, c.path, c.body); r.Status != 500 || r.Str("error") != "internal" {
			t.Errorf("%s %s with the lock stamp unreadable: %d %s", c.method, c.path, r.Status, strings.TrimSpace(r.Raw))
		}
	}
}
