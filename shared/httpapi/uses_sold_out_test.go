package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
)

// A coupon (not releasable) that sold out is sealed by the first take, or
// search for a useId's use, that finds every gate full: from then on each
// reads only up to its useId's home gate's reach (docs/http-api.md, "Sold
// out"). soldOutAnswers, in uses_scale_test.go, holds it for 2,000 buyers.

// homedIDs returns n useIds (prefix-i) homed at gate g of an action of
// gates gates, none of them in used (and adds them to it).
func homedIDs(prefix string, gates, g, n int, used map[string]bool) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if !used[id] && action.HomeGate(action.UseToken(id), gates) == g {
			out = append(out, id)
			used[id] = true
		}
	}
	return out
}

// takeEach takes a use for each useId, 8 at once (each must answer 200),
// and returns the usedAt each was answered.
func takeEach(t *testing.T, env *testkit.Env, id string, ids []string) map[string]string {
	t.Helper()
	var mu sync.Mutex
	taken := map[string]string{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, u := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", fmt.Sprintf(`{"useId":%q}`, u))
			if err != nil || r.Status != 200 {
				t.Errorf("take %s: %v %v", u, err, r)
				return
			}
			mu.Lock()
			taken[u] = r.Str("usedAt")
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return taken
}

// coupon creates a coupon of the given number of full gates and returns
// its maxUses and gates.
func coupon(t *testing.T, env *testkit.Env, id string, gates int) (maxUses, n int) {
	t.Helper()
	maxUses = gates * action.GateSeats
	create(t, env, fmt.Sprintf(`{"actionId":%q,"userId":"u","maxUses":%d}`, id, maxUses))
	return maxUses, action.Gates(maxUses)
}

// fill takes every use of a coupon of maxUses, with useIds prefix-i.
func fill(t *testing.T, env *testkit.Env, id, prefix string, maxUses int) map[string]string {
	t.Helper()
	ids := make([]string, maxUses)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return takeEach(t, env, id, ids)
}

func sealed(t *testing.T, env *testkit.Env, id string) bool {
	_, ok := rawItem(t, env, store.GatePrefix+"0#"+id)["so"]
	return ok
}

// TestSealRecordsTheReachTakesLeftUnrecorded: a take raises its home
// gate's reach after its use is written, so one that stopped between the
// two (or one made before gates kept a reach) leaves it short. The take
// that finds every gate full seals the action: it reads every gate and
// raises each reach to the furthest use of a useId homed there, then marks
// gate 0, and only after that does a take stop at a reach. Here every
// reach is taken off a full 720-use coupon (30 gates) before its first
// refusal: after it, each of the 720 useIds sent again without a key
// answers its 200, and a new one 409 no_uses_left.
func TestSealRecordsTheReachTakesLeftUnrecorded(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	maxUses, gates := coupon(t, env, "tix", 30)
	taken := fill(t, env, "tix", "fan", maxUses)
	recorded := 0
	for i := range gates {
		pk := fmt.Sprintf("%s%d#tix", store.GatePrefix, i)
		if r, ok := rawItem(t, env, pk)["r"].(*types.AttributeValueMemberN); ok && r.Value != "0" {
			recorded++
		}
		setAttr(t, env, pk, "r", nil)
	}
	if recorded == 0 {
		t.Fatal("no take went past its home gate: nothing to unrecord")
	}
	if r := do(t, env, "POST", "/actions/tix/consume", `{"useId":"late-0"}`); r.Status != 409 || r.Str("error") != "no_uses_left" {
		t.Fatalf("a take of a full coupon: %d %s", r.Status, r.Raw)
	}
	if !sealed(t, env, "tix") {
		t.Fatal("the refused take did not seal the action")
	}
	for useID, at := range taken {
		if r := do(t, env, "POST", "/actions/tix/consume", fmt.Sprintf(`{"useId":%q}`, useID)); r.Status != 200 || r.Str("usedAt") != at {
			t.Fatalf("%s (usedAt %s) sent again after the seal: %d %s", useID, at, r.Status, r.Raw)
		}
	}
	if r := do(t, env, "POST", "/actions/tix/consume", `{"useId":"late-1"}`); r.Status != 409 || r.Str("error") != "no_uses_left" {
		t.Fatalf("a take of a sealed coupon: %d %s", r.Status, r.Raw)
	}
	t.Logf("%d of %d gates' reaches taken off before the seal", recorded, gates)
}

// TestSoldOutThenClosedIsSealedByItsSearch: a coupon whose last use was
// taken before any take was refused, then canceled (or expired), is
// sealed by the first late take's search (it finds every gate full); the
// late takes after it read no further than their home gates' reaches (2
// BatchGetItems up to a reach of 12), where each read every gate again.
func TestSoldOutThenClosedIsSealedByItsSearch(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	maxUses := 14 * action.GateSeats
	gates := action.Gates(maxUses)
	for _, tc := range []struct{ id, code string }{{"flash", "canceled"}, {"flash2", "expired"}} {
		create(t, env, fmt.Sprintf(`{"actionId":%q,"userId":"u","maxUses":%d,"expiresAt":%q}`, tc.id, maxUses,
			time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
		fill(t, env, tc.id, "buyer", maxUses)
		if tc.code == "canceled" {
			if r := do(t, env, "POST", "/actions/"+tc.id+"/cancel", `{}`); r.Status != 200 {
				t.Fatalf("cancel: %d %s", r.Status, r.Raw)
			}
		} else {
			env.Shift(2 * time.Hour)
		}
		env.Counter.Take()
		var reads, most []int
		for i := range 4 {
			useID := fmt.Sprintf("late-%d", i)
			r := do(t, env, "POST", "/actions/"+tc.id+"/consume", fmt.Sprintf(`{"useId":%q}`, useID))
			if r.Status != 410 || r.Str("error") != tc.code {
				t.Fatalf("%s: %s: %d %s", tc.code, useID, r.Status, r.Raw)
			}
			reads = append(reads, env.Counter.Take()["BatchGetItem"])
			home := action.HomeGate(action.UseToken(useID), gates)
			reach, _ := rawItem(t, env, fmt.Sprintf("%s%d#%s", store.GatePrefix, home, tc.id))["r"].(*types.AttributeValueMemberN)
			n := 0
			if reach != nil {
				n, _ = strconv.Atoi(reach.Value)
			}
			most = append(most, mostReads(n))
		}
		t.Logf("sold out, then %s: 4 late takes read %v BatchGetItems (their reaches allow %v; every gate: %d)", tc.code, reads, most, readAll(gates)+1)
		if !sealed(t, env, tc.id) {
			t.Fatalf("sold out, then %s: not sealed by a late take", tc.code)
		}
		for i := 1; i < len(reads); i++ {
			if reads[i] > most[i] {
				t.Fatalf("sold out, then %s: late takes read %v BatchGetItems, their reaches allow %v", tc.code, reads, most)
			}
		}
	}
}

// TestSealedTakeReadsUpToItsReach: a useId x whose use lies 12 gates
// along its probe order, so its home gate's reach is 12. On the sealed
// coupon, open and then canceled, a take of x or of another useId homed
// there, with a key or without, reads at most 2 BatchGetItems, as the docs
// say (the search once read 3, its reads not lined up with a take's, and a
// keyed take once canceled searched twice: 6).
func TestSealedTakeReadsUpToItsReach(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	maxUses, gates := coupon(t, env, "cp", 13)
	used := map[string]bool{}
	x := homedIDs("x", gates, 7, 1, used)[0]
	tok := action.UseToken(x)
	order := make([]int, gates)
	for k := range order {
		order[k] = (action.HomeGate(tok, gates) + k*action.ProbeStep(tok, gates)) % gates
	}
	// The gates at positions 0 to 11 of x's probe order full, x at 12,
	// then every other seat, each at its home.
	var first []string
	for _, g := range order[:12] {
		first = append(first, homedIDs("f", gates, g, action.GateCap(maxUses, g), used)...)
	}
	takeEach(t, env, "cp", first)
	if r := do(t, env, "POST", "/actions/cp/consume", fmt.Sprintf(`{"useId":%q}`, x), "Idempotency-Key", "key-x"); r.Status != 200 {
		t.Fatalf("x: %d %s", r.Status, r.Raw)
	}
	takeEach(t, env, "cp", homedIDs("r", gates, order[12], action.GateCap(maxUses, order[12])-1, used))
	if r := do(t, env, "POST", "/actions/cp/consume", `{"useId":"late-0"}`); r.Status != 409 || !sealed(t, env, "cp") {
		t.Fatalf("late-0: %d %s (sealed: %v)", r.Status, r.Raw, sealed(t, env, "cp"))
	}
	if r, _ := rawItem(t, env, fmt.Sprintf("%s%d#cp", store.GatePrefix, order[0]))["r"].(*types.AttributeValueMemberN); r == nil || r.Value != "12" {
		t.Fatalf("x's home gate's reach: %v, want 12", r)
	}
	y := homedIDs("y", gates, order[0], 1, used)[0] // homed with x, no use
	check := func(what string, r *testkit.Response, status int) {
		t.Helper()
		got := env.Counter.Take()
		t.Logf("%-20s %d %v", what, r.Status, got)
		if r.Status != status || got["BatchGetItem"] > 2 {
			t.Fatalf("%s: %d %s, %v; want %d and at most 2 BatchGetItem", what, r.Status, r.Raw, got, status)
		}
	}
	take := func(useID string, key ...string) *testkit.Response {
		return do(t, env, "POST", "/actions/cp/consume", fmt.Sprintf(`{"useId":%q}`, useID), key...)
	}
	env.Counter.Take()
	check("y", take(y), 409)
	check("x", take(x), 200)
	check("x keyed", take(x, "Idempotency-Key", "key-x"), 200)
	if r := do(t, env, "POST", "/actions/cp/cancel", `{}`); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	env.Counter.Take()
	check("y (canceled)", take(y), 410)
	check("x (canceled)", take(x), 200)
	check("x keyed (canceled)", take(x, "Idempotency-Key", "key-x"), 200)
}

// TestOneSealPerSellOut: 16 late takes at once on a coupon that just sold
// out all find every gate full, and one of them seals it: one read of
// every gate for the seal (its claim on gate 0 turns the others away),
// not one each.
func TestOneSealPerSellOut(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	maxUses := 13 * action.GateSeats
	const burst = 16
	for trial := range 2 {
		id := fmt.Sprintf("sale%d", trial)
		create(t, env, fmt.Sprintf(`{"actionId":%q,"userId":"u","maxUses":%d}`, id, maxUses))
		fill(t, env, id, "buyer", maxUses)
		env.Counter.Take()
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range burst {
			wg.Go(func() {
				<-start
				r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", fmt.Sprintf(`{"useId":"late-%d"}`, i))
				if err != nil || r.Status != 409 {
					t.Errorf("late-%d: %v %v", i, err, r)
				}
			})
		}
		close(start)
		wg.Wait()
		got := env.Counter.Take()
		// Each late take reads at most every gate after its home (2 at 13
		// gates); the seal reads every gate once more (1).
		t.Logf("trial %d: %d late takes at once: %v", trial, burst, got)
		if got["BatchGetItem"] > burst*readAll(action.Gates(maxUses))+1 || !sealed(t, env, id) {
			t.Fatalf("%d late takes at once: %v (sealed %v): more than one seal read every gate", burst, got, sealed(t, env, id))
		}
	}
}

// TestSealWritesPublishNothing: the reaches recorded on a 7-gate coupon's
// gates, 8 seals at once and a cancel change no use: exactly maxUses
// action.used, each with its own eventId, no use_released, no stream
// record set aside; republish makes no other event; GET counts them all.
func TestSealWritesPublishNothing(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.WithEvents)
	maxUses := 7 * action.GateSeats
	from := time.Now().UTC()
	create(t, env, fmt.Sprintf(`{"actionId":"ev","userId":"u","maxUses":%d}`, maxUses))
	fill(t, env, "ev", "b", maxUses)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if r, err := testkit.Send(client, "POST", env.URL+"/actions/ev/consume", fmt.Sprintf(`{"useId":"late-%d"}`, i)); err != nil || r.Status != 409 {
				t.Errorf("late-%d: %v %v", i, err, r)
			}
		})
	}
	wg.Wait()
	if !sealed(t, env, "ev") {
		t.Fatal("not sealed")
	}
	if r := do(t, env, "POST", "/actions/ev/cancel", `{}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	if g := do(t, env, "GET", "/actions/ev", ""); g.Body["usesHeld"] != float64(maxUses) {
		t.Fatalf("GET: %s", g.Raw)
	}
	events := func() (used, released int, ids map[string]bool) {
		env.Settled(t)
		ids = map[string]bool{}
		for _, e := range env.Bus.Events() {
			var d struct {
				ActionID string
				EventID  string `json:"eventId"`
			}
			if json.Unmarshal(e.Detail, &d) != nil || d.ActionID != "ev" {
				continue
			}
			switch e.DetailType {
			case "action.used":
				used++
				ids[d.EventID] = true
			case "action.use_released":
				released++
			}
		}
		return used, released, ids
	}
	used, released, ids := events()
	if p := do(t, env, "POST", "/_local/republish", fmt.Sprintf(`{"from":%q,"to":%q}`, from.Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))); p.Status != 200 {
		t.Fatalf("republish: %s", p.Raw)
	}
	_, _, again := events()
	if used != maxUses || len(ids) != maxUses || released != 0 || len(again) != maxUses || strings.Contains(env.Log.String(), "undecodable stream record") {
		t.Fatalf("%d action.used (%d ids), %d use_released; after republish %d ids", used, len(ids), released, len(again))
	}
}

// TestHolderAnswersOnAnInstanceThatHasNotSeenTheCancel: two API instances
// on one table, as Lambda runs them. Instance A read the coupon (its copy
// is kept a minute), instance B cancels it. A holder whose use lies past
// its home gate, sent again to A, answers its 200 as on B: A takes the
// action for open, finds its home gate closed, and then looks for the use
// (it answered 410 canceled, and a new key kept that 410 for good).
func TestHolderAnswersOnAnInstanceThatHasNotSeenTheCancel(t *testing.T) {
	t.Parallel()
	a := testkit.NewEnv(t)
	b := testkit.NewEnv(t, func(o *server.Options) { o.Table = a.Table })
	maxUses, gates := coupon(t, a, "c2", 2)
	used := map[string]bool{}
	x := homedIDs("x", gates, 0, 1, used)[0]
	takeEach(t, a, "c2", homedIDs("f", gates, 0, action.GateCap(maxUses, 0), used))
	first := takeEach(t, a, "c2", []string{x})[x]
	if c := do(t, b, "POST", "/actions/c2/cancel", `{}`); c.Status != 200 {
		t.Fatalf("cancel: %d %s", c.Status, c.Raw)
	}
	rb := do(t, b, "POST", "/actions/c2/consume", fmt.Sprintf(`{"useId":%q}`, x))
	ra := do(t, a, "POST", "/actions/c2/consume", fmt.Sprintf(`{"useId":%q}`, x))
	ka := do(t, a, "POST", "/actions/c2/consume", fmt.Sprintf(`{"useId":%q}`, x), "Idempotency-Key", "kx")
	kb := do(t, b, "POST", "/actions/c2/consume", fmt.Sprintf(`{"useId":%q}`, x), "Idempotency-Key", "kx")
	for name, r := range map[string]*testkit.Response{"B": rb, "A": ra, "A with a new key": ka, "the key re-sent to B": kb} {
		if r.Status != 200 || r.Str("usedAt") != first {
			t.Fatalf("x (its use in gate 1, home 0) after the cancel, on %s: %d %s; want 200, usedAt %s", name, r.Status, r.Raw, first)
		}
	}
	if ra.Raw != rb.Raw {
		t.Fatalf("the holder's answer differs between instances:\nA %s\nB %s", ra.Raw, rb.Raw)
	}
}

// TestSmallCouponRecordsNoReach: a coupon of 5 gates or fewer is never
// sealed (its first read covers every gate), so a take past its home gate
// writes no reach: 3 UpdateItems (its record, the full home gate, its
// gate) and 2 write units, as before gates kept a reach.
func TestSmallCouponRecordsNoReach(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	maxUses, gates := coupon(t, env, "sm", 2)
	used := map[string]bool{}
	takeEach(t, env, "sm", homedIDs("f", gates, 0, action.GateCap(maxUses, 0), used))
	x := homedIDs("x", gates, 0, 1, used)[0]
	env.Counter.Take()
	r := do(t, env, "POST", "/actions/sm/consume", fmt.Sprintf(`{"useId":%q}`, x))
	got := env.Counter.Take()
	lines := logLines(t, env, "POST /actions/{actionId}/consume")
	_, reach := rawItem(t, env, store.GatePrefix+"0#sm")["r"]
	if r.Status != 200 || got["UpdateItem"] != 3 || lines[len(lines)-1]["writeUnits"] != 2.0 || reach {
		t.Fatalf("a take past its full home gate on a 2-gate coupon: %d %v, %v write units, reach written %v; want 200, 3 UpdateItem, 2 write units, no reach",
			r.Status, got, lines[len(lines)-1]["writeUnits"], reach)
	}
}

// TestStaleInstanceRefusalCostsAsBefore: a take of a useId with no use,
// sent to an API instance whose copy of the action predates another
// instance's cancel, is refused by its home gate, which shows the use
// could lie nowhere else (not full; releasable: no forward for it): 410,
// and no search (its GetItem reads the action again), on a releasable
// action, a 1-gate and a 5-gate coupon.
func TestStaleInstanceRefusalCostsAsBefore(t *testing.T) {
	t.Parallel()
	a := testkit.NewEnv(t)
	b := testkit.NewEnv(t, func(o *server.Options) { o.Table = a.Table })
	for _, tc := range []struct{ id, body string }{
		{"rl", `{"actionId":"rl","userId":"u","maxUses":3,"releasable":true}`},
		{"cp", `{"actionId":"cp","userId":"u","maxUses":3}`},
		{"cp5", fmt.Sprintf(`{"actionId":"cp5","userId":"u","maxUses":%d}`, 5*action.GateSeats)},
	} {
		create(t, a, tc.body)
		takeEach(t, a, tc.id, []string{"h1"}) // a's copy of the action, open
		if c := do(t, b, "POST", "/actions/"+tc.id+"/cancel", `{}`); c.Status != 200 {
			t.Fatalf("cancel: %d %s", c.Status, c.Raw)
		}
		a.Counter.Take()
		for _, keyed := range []bool{false, true} {
			var key []string
			want := map[string]int{"BatchGetItem": 1, "GetItem": 1, "UpdateItem": 2}
			if keyed {
				key, want["UpdateItem"] = []string{"Idempotency-Key", "k-" + tc.id}, 3
			}
			r := do(t, a, "POST", "/actions/"+tc.id+"/consume", fmt.Sprintf(`{"useId":"fresh-%v"}`, keyed), key...)
			if got := a.Counter.Take(); r.Status != 410 || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s (keyed %v): a useId with no use, on an instance that has not seen the cancel: %d %v; want 410 and %v",
					tc.id, keyed, r.Status, got, want)
			}
		}
	}
}

// TestSealClaimAnswerLost: the first late take of a sold-out coupon claims
// gate 0 to seal it, and that claim's answer is lost after it applied: the
// SDK re-sends it, and the claim, already there, is the take's own. The
// take seals the action (it took the re-send's refusal for another
// sealer's claim, and no take sealed it for the claim's 30 s).
func TestSealClaimAnswerLost(t *testing.T) {
	t.Parallel()
	env, p := proxied(t)
	maxUses, _ := coupon(t, env, "lost", 13)
	fill(t, env, "lost", "buyer", maxUses)
	p.PassThenDrop(2, 1) // the take's record and its home gate, then the claim
	if r := do(t, env, "POST", "/actions/lost/consume", `{"useId":"late-0"}`); r.Status != 409 || r.Str("error") != "no_uses_left" {
		t.Fatalf("late-0: %d %s", r.Status, r.Raw)
	}
	if c := p.Counts(); c.Dropped != 1 {
		t.Fatalf("fault proxy: %s; want the claim's answer dropped", p)
	}
	if !sealed(t, env, "lost") {
		t.Fatal("the claim's answer was lost, and the take did not seal the action")
	}
}

// TestSealStoppedByAnOutageIsMadeAfterItsClaimLapses: the seal's last
// write (the mark) meets DynamoDB failing every try: the late take still
// answers its 409, the coupon is left unsealed with gate 0 claimed, a take
// while the claim holds leaves it so, and the first take after the claim's
// 30 s seals it.
func TestSealStoppedByAnOutageIsMadeAfterItsClaimLapses(t *testing.T) {
	t.Parallel()
	env, p := proxied(t)
	maxUses, _ := coupon(t, env, "down", 13)
	fill(t, env, "down", "buyer", maxUses)
	late := func(n int) {
		t.Helper()
		body := fmt.Sprintf(`{"useId":"late-%d"}`, n)
		if r := do(t, env, "POST", "/actions/down/consume", body); r.Status != 409 || r.Str("error") != "no_uses_left" {
			t.Fatalf("late-%d: %d %s", n, r.Status, r.Raw)
		}
	}
	p.PassThenFail(3, 50) // the take's record, its home gate and the claim land; then every write fails
	late(0)
	if c := p.Counts(); c.ServerErrors == 0 {
		t.Fatalf("fault proxy: %s; want the seal's mark refused", p)
	}
	p.PassThenFail(0, 0) // DynamoDB is back
	if sealed(t, env, "down") {
		t.Fatal("sealed, though the mark never landed")
	}
	late(1)
	if sealed(t, env, "down") {
		t.Fatal("a take sealed the coupon while another take's claim held")
	}
	env.Shift(31 * time.Second)
	late(2)
	if !sealed(t, env, "down") {
		t.Fatal("the claim lapsed, and the next late take did not seal the coupon")
	}
}
