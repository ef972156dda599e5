package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
)

// logLines returns the request log lines of route (the JSON the API logs
// for every request).
func logLines(t *testing.T, env *testkit.Env, route string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(env.Log.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) == nil && l["msg"] == "request" && l["route"] == route {
			out = append(out, l)
		}
	}
	return out
}

// TestTakeCostsTheSameAtAnyN: maxUses up to 1,000,000 is accepted; every
// take's request log line carries writeUnits, what DynamoDB reported for
// it, and no take costs more than 2 write units: the 1st, the 500th and the
// 1,000th take of an action of a million uses cost the same as a take of a
// 2-use coupon. (The single-item design charged 1, 2, 12, 112 write units
// per take at 1, 10, 100, 1,000 uses held and refused maxUses over 1,000.)
func TestTakeCostsTheSameAtAnyN(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.On(testkit.OwnDynamoDB(t)))
	if r := do(t, env, "POST", "/actions", `{"actionId":"mega","userId":"u","maxUses":1000001}`); r.Status != 400 || r.Str("field") != "maxUses" {
		t.Fatalf("maxUses over a million: %d %s", r.Status, r.Raw)
	}
	create(t, env, `{"actionId":"mega","userId":"u","maxUses":1000000}`)
	create(t, env, `{"actionId":"pair","userId":"u","maxUses":2}`)
	if r := do(t, env, "POST", "/actions/pair/consume", `{"useId":"a"}`, "Idempotency-Key", "pair-a"); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	n := testkit.Scale(1000)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if r, err := testkit.Send(client, "POST", env.URL+"/actions/mega/consume", fmt.Sprintf(`{"useId":"u%d"}`, i), "Idempotency-Key", fmt.Sprintf("mega-%d", i)); err != nil || r.Status != 200 {
				t.Errorf("take %d: %v %v", i, err, r)
			}
		})
	}
	wg.Wait()
	if g := do(t, env, "GET", "/actions/mega", ""); g.Body["usesHeld"] != float64(n) || g.Body["usesRemaining"] != float64(1_000_000-n) {
		t.Fatalf("GET: %s", g.Raw)
	}
	lines := logLines(t, env, "POST /actions/{actionId}/consume")
	if len(lines) != n+1 {
		t.Fatalf("%d consume log lines, want %d", len(lines), n+1)
	}
	most := 0.0
	for _, l := range lines {
		wu, ok := l["writeUnits"].(float64)
		if !ok || wu > 2 || wu <= 0 {
			t.Fatalf("a take's log line: writeUnits %v: %v", l["writeUnits"], l)
		}
		most = max(most, wu)
	}
	t.Logf("%d takes (1 on 2 uses, %d on a million): at most %.1f write units each", n+1, n, most)
}

// TestExactlyNUnderLostAnswers: 2,000 distinct takers, 256 at once, on
// maxUses 1,500 while the fault proxy drops a tenth of DynamoDB's answers
// after the write applied (the SDK re-sends it) and every caller re-sends
// its take with its Idempotency-Key on a 5xx or a broken connection:
// exactly 1,500 × 200 and 500 × 409 no_uses_left, and the action holds
// exactly the 1,500 uses answered 200, each once.
func TestExactlyNUnderLostAnswers(t *testing.T) {
	t.Parallel()
	takers, maxUses, atOnce := testkit.Scale(2000), testkit.Scale(1500), testkit.Scale(256)
	p, err := faults.Start(testkit.OwnDynamoDB(t), faults.Rates{}, 31, "UpdateItem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	env := testkit.NewEnv(t, func(o *server.Options) {
		o.AWS.BaseEndpoint = aws.String(p.URL)
		o.AWS.Retryer = func() aws.Retryer { return retry.AddWithMaxBackoffDelay(retry.NewStandard(), 50*time.Millisecond) }
	})
	create(t, env, fmt.Sprintf(`{"actionId":"sale","userId":"shop","maxUses":%d}`, maxUses))
	p.SetRates(faults.Rates{DropAfter: 0.1})
	var ok, full, resent atomic.Int32
	var mu sync.Mutex
	taken := map[string]string{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, atOnce)
	for i := range takers {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			body, key := fmt.Sprintf(`{"useId":"buyer-%d"}`, i), fmt.Sprintf("order-%d", i)
			for try := 0; ; try++ {
				r, err := testkit.Send(client, "POST", env.URL+"/actions/sale/consume", body, "Idempotency-Key", key)
				switch {
				case err == nil && r.Status == 200:
					ok.Add(1)
					mu.Lock()
					taken[fmt.Sprintf("buyer-%d", i)] = r.Str("usedAt")
					mu.Unlock()
				case err == nil && r.Status == 409 && r.Str("error") == "no_uses_left":
					full.Add(1)
				case (err != nil || r.Status >= 500 || r.Str("error") == "in_progress") && try < 30:
					// A caller re-sends on a 5xx or a broken connection, and
					// after a pause on in_progress (its attempt before still
					// runs, or failed and could not say so).
					if err == nil && r.Status == 409 {
						time.Sleep(100 * time.Millisecond)
					}
					resent.Add(1)
					continue
				default:
					t.Errorf("buyer %d: %v %v", i, err, r)
				}
				return
			}
		})
	}
	wg.Wait()
	p.SetRates(faults.Rates{})
	t.Logf("%d × 200, %d × 409, %d re-sends by callers; fault proxy: %s", ok.Load(), full.Load(), resent.Load(), p)
	if int(ok.Load()) != maxUses || int(full.Load()) != takers-maxUses || len(taken) != maxUses {
		t.Fatalf("%d × 200 (%d buyers), %d × 409; want exactly %d and %d", ok.Load(), len(taken), full.Load(), maxUses, takers-maxUses)
	}
	if p.Counts().Dropped == 0 {
		t.Fatal("no answer was dropped")
	}
	if g := do(t, env, "GET", "/actions/sale", ""); g.Body["usesHeld"] != float64(maxUses) || g.Body["usesRemaining"] != 0.0 {
		t.Fatalf("GET: %s", g.Raw)
	}
	listed := map[string]bool{}
	for cursor := ""; ; {
		path := "/actions/sale/uses?limit=100"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		l := do(t, env, "GET", path, "")
		for _, u := range l.Body["uses"].([]any) {
			id := u.(map[string]any)["useId"].(string)
			if listed[id] || taken[id] == "" {
				t.Fatalf("listed %s twice, or not answered 200", id)
			}
			listed[id] = true
		}
		if cursor = l.Str("cursor"); cursor == "" {
			break
		}
	}
	if len(listed) != maxUses {
		t.Fatalf("%d uses listed, want %d", len(listed), maxUses)
	}
	soldOutAnswers(t, env, "sale", maxUses, takers, taken)
}

// soldOutAnswers sends every buyer's take again without its key, one after
// another, to a coupon whose maxUses were all taken (taken: useId → usedAt
// answered), then cancels it and sends them all again, without their keys
// and with them: each that holds a use answers its 200, the others 409
// no_uses_left (410 canceled once it is canceled; with its key, its first
// answer, 409). None reads a gate further along its probe sequence than
// its home gate's reach, the record of how far any use of a useId homed
// there lies, made exact when the take that found every gate full sealed
// the action: a take is its 2 UpdateItems (none once canceled) and the
// BatchGetItems that cover positions up to the reach (4 gates and gate 0 at
// first, then 8 and the home gate again, 16, 32, …): 2 while the reach is
// under 12, at any maxUses. (Before gates kept a reach, a refused take read every
// gate: 417 BatchGetItems at a million uses.)
func soldOutAnswers(t *testing.T, env *testkit.Env, id string, maxUses, takers int, taken map[string]string) {
	t.Helper()
	gates := action.Gates(maxUses)
	gate := func(i int) map[string]types.AttributeValue {
		return rawItem(t, env, fmt.Sprintf("%s%d#%s", store.GatePrefix, i, id))
	}
	// Where each use lies, from the gates as they are.
	reach, uses := make([]int, gates), make([]int, gates)
	for i := range gates {
		item := gate(i)
		for name := range item {
			if tok, ok := strings.CutPrefix(name, "e:"); ok {
				home := action.HomeGate(tok, gates)
				uses[home] = max(uses[home], action.ProbePosition(tok, gates, i))
			}
		}
		if r, ok := item["r"].(*types.AttributeValueMemberN); ok {
			reach[i], _ = strconv.Atoi(r.Value)
		}
	}
	send := func(round string, refusal int, code string, keyed bool, writes, every int) (batches int) {
		env.Counter.Take()
		held, refused := 0, 0
		for i := 0; i < takers; i += every {
			useID := fmt.Sprintf("buyer-%d", i)
			var key []string
			if keyed {
				key = []string{"Idempotency-Key", fmt.Sprintf("order-%d", i)}
			}
			r := do(t, env, "POST", "/actions/"+id+"/consume", fmt.Sprintf(`{"useId":%q}`, useID), key...)
			switch at := taken[useID]; {
			case at != "" && r.Status == 200 && r.Str("usedAt") == at:
				held++
			case at == "" && r.Status == refusal && r.Str("error") == code:
				refused++
			default:
				t.Fatalf("%s: %s (usedAt %q) sent again: %d %s", round, useID, at, r.Status, r.Raw)
			}
			got := env.Counter.Take()
			h := action.HomeGate(action.UseToken(useID), gates)
			most := mostReads(min(max(reach[h], uses[h]), gates-1))
			if got["UpdateItem"] != writes || got["BatchGetItem"] > most || got["GetItem"] > 1 || len(got) > 3 {
				t.Fatalf("%s: %s sent again (home gate's reach %d): %v; want %d UpdateItem and at most %d BatchGetItem",
					round, useID, reach[h], got, writes, most)
			}
			batches += got["BatchGetItem"]
		}
		if every == 1 && (held != maxUses || refused != takers-maxUses) {
			t.Fatalf("%s: %d held, %d refused; want %d and %d", round, held, refused, maxUses, takers-maxUses)
		}
		return batches
	}
	sold := send("sold out", 409, "no_uses_left", false, 2, 1)
	if r := do(t, env, "POST", "/actions/"+id+"/cancel", `{}`); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	// Once canceled, every 5th buyer: without its key, then with it (its
	// first answer again, 200 or the 409 it was refused: its record's
	// write, refused, reads it).
	canceled := send("canceled", 410, "canceled", false, 0, 5)
	keyed := send("canceled, keyed", 409, "no_uses_left", true, 1, 5)
	if _, ok := gate(0)["so"]; !ok && gates > 5 {
		t.Fatal("gate 0 does not say the action is sold out")
	}
	for i := range gates {
		if reach[i] < uses[i] && gates > 5 { // (a coupon of 5 gates or fewer keeps none: never sealed)
			t.Fatalf("gate %d keeps a reach of %d, and a use of a useId homed there lies at %d", i, reach[i], uses[i])
		}
	}
	slices.Sort(reach)
	t.Logf("sold out, %d gates (reach: median %d, max %d): %d takes sent again read %d BatchGetItems; once canceled, %d of them %d, and %d with their keys (reading every gate: %d each)",
		gates, reach[gates/2], reach[gates-1], takers, sold, takers/5, canceled, keyed, readAll(gates))
}

// mostReads is how many BatchGetItems a take or search of a sealed coupon
// reads at most for a useId whose home gate's reach is reach: the first
// read (4 gates and gate 0), the next (8, and the home gate again), then
// one for each further batch (16, 32, … up to 100) up to the reach.
func mostReads(reach int) int {
	most := 2
	for pos, n := 13, 16; pos <= reach; pos, n = pos+n, min(n*2, 100) {
		most++
	}
	return most
}

// readAll is how many BatchGetItems a take reads when it reads every gate
// after its home gate (4 gates, then 8, 16, … up to 100 a request).
func readAll(gates int) int {
	n := 0
	for off, k := 1, 4; off < gates; off, k = off+k, min(k*2, 100) {
		n++
	}
	return n
}
