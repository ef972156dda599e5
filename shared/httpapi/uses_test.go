package httpapi_test

import (
	"fmt"
	"regexp"
	"slices"
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
)

// Requests of a multi-use call: a take writes its call's record and its
// gate (the first take of an action on an instance also reads the action);
// a release writes the gate and stamps the take's record; a refusal the
// action's item decides costs its one read.
var (
	takeFirst = map[string]int{"GetItem": 1, "UpdateItem": 2}
	takeOne   = map[string]int{"UpdateItem": 2}
	// A release reads where the use is, stamps its take's record, frees it.
	releaseOne = map[string]int{"BatchGetItem": 1, "UpdateItem": 2}
	batchGet   = map[string]int{"BatchGetItem": 1}
	getCount   = map[string]int{"GetItem": 1, "BatchGetItem": 1}
	listUses   = map[string]int{"GetItem": 1, "BatchGetItem": 2}
)

// TestUsesLicence: a 3-seat releasable licence. Three devices activate, the
// fourth is refused, one deactivates, the fourth activates. A take is its
// call's record and one conditional write on the action's gate; a release
// one write on the gate and the stamp on the take's record; a repeated
// take answers byte for byte as the first.
func TestUsesLicence(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	c := create(t, env, `{"actionId":"lic","userId":"acme","maxUses":3,"releasable":true,"payload":{"licence":"K-1"}}`)
	if c.Body["maxUses"] != 3.0 || c.Body["usesHeld"] != 0.0 || c.Body["usesRemaining"] != 3.0 || c.Body["releasable"] != true {
		t.Fatalf("create body: %s", c.Raw)
	}
	first := map[string]string{}
	for i, dev := range []string{"laptop", "phone", "tablet"} {
		r := do(t, env, "POST", "/actions/lic/consume", `{"useId":"`+dev+`"}`)
		want := takeOne
		if i == 0 {
			want = takeFirst
		}
		expect(t, env, r, 200, "", want)
		if r.Str("useId") != dev || r.Str("usedAt") == "" || r.Body["usesHeld"] != nil || r.Body["maxUses"] != 3.0 ||
			r.Str("state") != "active" || !strings.Contains(r.Raw, `"payload":{"licence":"K-1"}`) {
			t.Fatalf("take %s: %s", dev, r.Raw)
		}
		first[dev] = r.Raw
	}
	again := do(t, env, "POST", "/actions/lic/consume", `{"useId":"phone"}`)
	expect(t, env, again, 200, "", takeOne)
	if again.Raw != first["phone"] {
		t.Fatalf("phone again:\n%s\nfirst:\n%s", again.Raw, first["phone"])
	}
	full := do(t, env, "POST", "/actions/lic/consume", `{"useId":"desktop"}`)
	expect(t, env, full, 409, "no_uses_left", takeOne)
	if full.Body["maxUses"] != 3.0 {
		t.Fatalf("no_uses_left body lacks maxUses: %s", full.Raw)
	}
	rel := do(t, env, "POST", "/actions/lic/uses/phone/release", ``)
	expect(t, env, rel, 200, "", releaseOne)
	if rel.Str("useId") != "phone" || rel.Str("releasedAt") <= again.Str("usedAt") || rel.Str("usedAt") != again.Str("usedAt") {
		t.Fatalf("release: %s (take %s)", rel.Raw, again.Raw)
	}
	// Released already: without a key, another call finds no use to free.
	expect(t, env, do(t, env, "POST", "/actions/lic/uses/phone/release", `{}`), 404, "use_not_found", batchGet)
	desk := do(t, env, "POST", "/actions/lic/consume", `{"useId":"desktop"}`)
	expect(t, env, desk, 200, "", takeOne)
	// The first takes still answer as they did, whatever happened since.
	if r := do(t, env, "POST", "/actions/lic/consume", `{"useId":"laptop"}`); r.Raw != first["laptop"] {
		t.Fatalf("laptop again after other uses:\n%s\nfirst:\n%s", r.Raw, first["laptop"])
	}
	env.Counter.Take()

	g := do(t, env, "GET", "/actions/lic", "")
	expect(t, env, g, 200, "", getCount)
	if g.Body["usesHeld"] != 3.0 || g.Body["usesRemaining"] != 0.0 || g.Body["maxUses"] != 3.0 || strings.Contains(g.Raw, "payload") {
		t.Fatalf("GET: %s", g.Raw)
	}
	l := do(t, env, "GET", "/actions/lic/uses", "")
	expect(t, env, l, 200, "", listUses)
	var ids []string
	for _, u := range l.Body["uses"].([]any) {
		ids = append(ids, u.(map[string]any)["useId"].(string))
	}
	if fmt.Sprint(ids) != "[desktop laptop tablet]" || strings.Contains(l.Raw, "K-1") {
		t.Fatalf("uses: %s", l.Raw)
	}
	p1 := do(t, env, "GET", "/actions/lic/uses?limit=2", "")
	p2 := do(t, env, "GET", "/actions/lic/uses?limit=2&cursor="+p1.Str("cursor"), "")
	if len(p1.Body["uses"].([]any)) != 2 || p1.Str("cursor") == "" || !strings.Contains(p2.Raw, `"useId":"tablet"`) || p2.Str("cursor") != "" {
		t.Fatalf("pages: %s / %s", p1.Raw, p2.Raw)
	}
	for _, c := range []string{"", "nope", "bGlj", "OTkuYQ"} {
		if r := do(t, env, "GET", "/actions/lic/uses?cursor="+c, ""); r.Status != 400 || r.Str("field") != "cursor" {
			t.Fatalf("cursor %q: %s", c, r.Raw)
		}
	}
	env.Counter.Take()

	// The refusals: nothing written; what the action's item decides costs
	// its one read.
	create(t, env, `{"actionId":"coupon","userId":"shop","maxUses":2}`)
	create(t, env, `{"actionId":"single","userId":"u"}`)
	for _, tc := range []struct {
		path, body string
		status     int
		code       string
		ddb        map[string]int
	}{
		{"/actions/coupon/uses/x/release", ``, 409, "not_releasable", get},
		{"/actions/single/uses/x/release", ``, 409, "not_releasable", get},
		{"/actions/lic/uses/nobody/release", ``, 404, "use_not_found", batchGet},
		{"/actions/nope/uses/x/release", ``, 404, "action_not_found", get},
		{"/actions/nope/consume", `{"useId":"x"}`, 404, "action_not_found", get},
		{"/actions/coupon/consume", `{}`, 400, "invalid_request", update},
		{"/actions/single/consume", `{"useId":"x"}`, 400, "invalid_request", get},
		{"/actions/coupon/consume", `{"useId":"a b"}`, 400, "invalid_request", none},
		{"/actions/lic/uses/../release", ``, 400, "invalid_request", none},
	} {
		r := do(t, env, "POST", tc.path, tc.body)
		if tc.path == "/actions/lic/uses/../release" {
			env.Counter.Take()
			continue // a client resolves "..": the route is another one
		}
		expect(t, env, r, tc.status, tc.code, tc.ddb)
		if tc.status == 400 && r.Str("field") != "useId" {
			t.Fatalf("%s %s: field %q, want useId: %s", tc.path, tc.body, r.Str("field"), r.Raw)
		}
	}
	if r := do(t, env, "GET", "/actions/single", ""); r.Str("state") != "active" || strings.Contains(r.Raw, "Uses") {
		t.Fatalf("single-use action after refused takes: %s", r.Raw)
	}
	env.Counter.Take()
	for body, field := range map[string]string{
		`{"userId":"u","maxUses":0}`:                          "maxUses",
		`{"userId":"u","maxUses":1000001}`:                    "maxUses",
		`{"userId":"u","maxUses":2,"pin":"2468"}`:             "pin",
		`{"userId":"u","releasable":true,"pin":"2468"}`:       "pin",
		`{"userId":"u","maxUses":"3"}`:                        "maxUses",
		`{"userId":"u","maxUses":3,"releasable":"yes"}`:       "releasable",
		`{"actionId":"x1","userId":"u","maxUses":3.5}`:        "maxUses",
		`{"actionId":"x2","userId":"u","maxUses":-1}`:         "maxUses",
		`{"actionId":"x3","userId":"u","maxUses":2,"pin":""}`: "pin", // "" is no value of pin (4 to 32 characters), not its absence
	} {
		r := do(t, env, "POST", "/actions", body)
		if field == "" {
			expect(t, env, r, 201, "", update)
			continue
		}
		expect(t, env, r, 400, "invalid_request", none)
		if r.Str("field") != field {
			t.Errorf("%s: field %q, want %q", body, r.Str("field"), field)
		}
	}
}

// TestSingleUseUnchanged: maxUses 1 (given or not) is today's single-use
// action: the same stored attributes and the same answers.
func TestSingleUseUnchanged(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	a := create(t, env, `{"actionId":"plain","userId":"u","payload":"p"}`)
	b := create(t, env, `{"actionId":"one","userId":"u","payload":"p","maxUses":1,"releasable":false}`)
	times := regexp.MustCompile(`"\d{4}-[0-9T:.-]+Z"`)
	if times.ReplaceAllString(strings.ReplaceAll(b.Raw, `"one"`, `"plain"`), "T") != times.ReplaceAllString(a.Raw, "T") {
		t.Fatalf("create bodies differ:\n%s\n%s", a.Raw, b.Raw)
	}
	names := func(id string) string {
		var out []string
		for k := range rawItem(t, env, id) {
			out = append(out, k)
		}
		slices.Sort(out)
		return fmt.Sprint(out)
	}
	if names("plain") != names("one") || strings.Contains(names("one"), "maxUses") || strings.Contains(names("one"), "use:") || strings.Contains(names("one"), "usesHeld") {
		t.Fatalf("stored attributes: plain %s, maxUses 1 %s", names("plain"), names("one"))
	}
	ca := do(t, env, "POST", "/actions/plain/consume", ``)
	cb := do(t, env, "POST", "/actions/one/consume", ``)
	if ca.Status != 200 || cb.Status != 200 || strings.Contains(cb.Raw, "uses") || strings.Contains(cb.Raw, "useId") {
		t.Fatalf("consumes: %s / %s", ca.Raw, cb.Raw)
	}
	env.Counter.Take()
	expect(t, env, do(t, env, "POST", "/actions/one/consume", ``), 409, "already_used", update)
}

// race runs one round: 64 concurrent takes with distinct useIds on a fresh
// action of maxUses 5. A 503 (the store unreachable after the SDK's own
// retries) is retried by the caller with the same useId, as a client does.
func race(t *testing.T, env *testkit.Env, id string, callers, maxUses int) (ok, full int) {
	t.Helper()
	create(t, env, fmt.Sprintf(`{"actionId":"%s","userId":"u","maxUses":%d}`, id, maxUses))
	return takeAll(t, env, id, callers)
}

// takeAll sends callers concurrent takes with distinct useIds and checks
// that the item holds exactly the uses answered 200.
func takeAll(t *testing.T, env *testkit.Env, id string, callers int) (ok, full int) {
	t.Helper()
	var wg sync.WaitGroup
	var okN, fullN atomic.Int32
	var mu sync.Mutex
	var bad []string
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			for try := 0; ; try++ {
				r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", fmt.Sprintf(`{"useId":"caller-%d"}`, i))
				switch {
				case err == nil && r.Status == 200:
					okN.Add(1)
				case err == nil && r.Status == 409 && r.Str("error") == "no_uses_left":
					fullN.Add(1)
				case (err != nil || r.Status == 503) && try < 20:
					continue
				default:
					mu.Lock()
					bad = append(bad, fmt.Sprint(err, r))
					mu.Unlock()
				}
				return
			}
		})
	}
	close(start)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("round %s: unexpected answers: %v", id, bad)
	}
	if g := do(t, env, "GET", "/actions/"+id, ""); g.Body["usesHeld"] != float64(okN.Load()) {
		t.Fatalf("round %s: usesHeld %v, but %d takes answered 200", id, g.Body["usesHeld"], okN.Load())
	}
	if l := do(t, env, "GET", "/actions/"+id+"/uses", ""); len(l.Body["uses"].([]any)) != int(okN.Load()) {
		t.Fatalf("round %s: %d uses listed, %d answered 200", id, len(l.Body["uses"].([]any)), okN.Load())
	}
	return int(okN.Load()), int(fullN.Load())
}

// TestUsesRace: 64 callers with distinct useIds race for an action of 5
// uses, 20 rounds (1,280 takes): exactly 5 × 200 and 59 × 409 each round.
func TestUsesRace(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.On(testkit.OwnDynamoDB(t)))
	rounds, start := testkit.Scale(20), time.Now()
	for round := range rounds {
		ok, full := race(t, env, fmt.Sprintf("r%d", round), 64, 5)
		if ok != 5 || full != 59 {
			t.Fatalf("round %d: %d × 200, %d × 409, want 5 and 59", round, ok, full)
		}
	}
	el := time.Since(start)
	t.Logf("hot item: %d rounds × 64 takes on one item each: %.0f takes/s (%v)", rounds, float64(rounds*64)/el.Seconds(), el.Round(time.Millisecond))
}

// TestUsesRaceLostAnswers: the same race while the fault proxy drops a
// tenth of the answers after DynamoDB applied the write. The SDK re-sends
// the take; the item answers that useId's use is held, so the retry
// replays its 200: a retried use is never a second use.
func TestUsesRaceLostAnswers(t *testing.T) {
	t.Parallel()
	p, err := faults.Start(testkit.OwnDynamoDB(t), faults.Rates{DropAfter: 0.1}, 7, "UpdateItem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	env := testkit.NewEnv(t, func(o *server.Options) {
		o.AWS.BaseEndpoint = aws.String(p.URL)
		o.AWS.Retryer = func() aws.Retryer { // the SDK's own attempts, with short waits
			return retry.AddWithMaxBackoffDelay(retry.NewStandard(), 50*time.Millisecond)
		}
	})
	for round := range testkit.Scale(20) { // 1,280 takes, about 130 answers dropped
		p.SetRates(faults.Rates{})
		ok, full := func() (int, int) {
			// create without faults; the race with them
			create(t, env, fmt.Sprintf(`{"actionId":"f%d","userId":"u","maxUses":5}`, round))
			p.SetRates(faults.Rates{DropAfter: 0.1})
			defer p.SetRates(faults.Rates{})
			return takeAll(t, env, fmt.Sprintf("f%d", round), 64)
		}()
		if ok != 5 || full != 59 {
			t.Fatalf("round %d: %d × 200, %d × 409, want 5 and 59 (%s)", round, ok, full, p)
		}
	}
	if p.Counts().Dropped == 0 {
		t.Fatalf("no answer was dropped: %s", p)
	}
	t.Logf("fault proxy: %s", p)
}

// TestReleaseTakeRace: takes and releases race on a releasable action of
// 3 uses (a pool of 8 useIds, each worker taking and releasing its own
// ones). No answer ever shows more than 3 uses held, and at the end the
// count, the stored uses and the answered takes and releases agree.
func TestReleaseTakeRace(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.On(testkit.OwnDynamoDB(t)))
	const maxUses, workers = 3, 8
	ops := testkit.Scale(20)
	create(t, env, fmt.Sprintf(`{"actionId":"seats","userId":"u","maxUses":%d,"releasable":true}`, maxUses))
	var taken, released atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan string, workers*ops+1)
	// Meanwhile, the action never holds more than maxUses.
	stop := make(chan struct{})
	var polls atomic.Int32
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if g, err := testkit.Send(client, "GET", env.URL+"/actions/seats", ""); err == nil && g.Body["usesHeld"].(float64) > maxUses {
				errs <- "more than maxUses held: " + g.Raw
				return
			}
			polls.Add(1)
		}
	}()
	for w := range workers {
		wg.Go(func() {
			use := fmt.Sprintf("dev-%d", w)
			for range ops {
				r, err := testkit.Send(client, "POST", env.URL+"/actions/seats/consume", `{"useId":"`+use+`"}`)
				switch {
				case err != nil:
					errs <- err.Error()
					return
				case r.Status == 409 && r.Str("error") == "no_uses_left":
					continue
				case r.Status != 200:
					errs <- r.Raw
					return
				}
				taken.Add(1)
				rel, err := testkit.Send(client, "POST", env.URL+"/actions/seats/uses/"+use+"/release", ``)
				if err != nil || rel.Status != 200 {
					errs <- fmt.Sprint(err, rel)
					return
				}
				released.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-polled
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	g := do(t, env, "GET", "/actions/seats", "")
	if g.Body["usesHeld"] != 0.0 || taken.Load() != released.Load() || taken.Load() < maxUses {
		t.Fatalf("after %d takes and %d releases: %s", taken.Load(), released.Load(), g.Raw)
	}
	t.Logf("%d takes and %d releases raced on 3 seats; %d reads of the count, never more than 3 held", taken.Load(), released.Load(), polls.Load())
}

// TestUsesKeyedRetry: a take retried with its Idempotency-Key replays its
// first answer (Idempotent-Replayed), even after the use was released; the
// key with another body is 422; a release retried with its key replays.
func TestUsesKeyedRetry(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"k","userId":"u","maxUses":2,"releasable":true}`)
	first := do(t, env, "POST", "/actions/k/consume", `{"useId":"a"}`, "Idempotency-Key", "take-a")
	expect(t, env, first, 200, "", takeFirst)
	// The re-send finds its record (one write refused) and its use in the
	// gate (one read).
	retry := do(t, env, "POST", "/actions/k/consume", `{"useId":"a"}`, "Idempotency-Key", "take-a")
	expect(t, env, retry, 200, "", map[string]int{"UpdateItem": 1, "BatchGetItem": 1})
	if retry.Raw != first.Raw || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("keyed retry: %s %v, first %s", retry.Raw, retry.Header, first.Raw)
	}
	expect(t, env, do(t, env, "POST", "/actions/k/consume", `{"useId":"b"}`, "Idempotency-Key", "take-a"), 422, "idempotency_key_reused", update)
	// A keyed release reads the gate, records what it frees, frees it and
	// stamps the take's record.
	rel := do(t, env, "POST", "/actions/k/uses/a/release", ``, "Idempotency-Key", "rel-a")
	expect(t, env, rel, 200, "", map[string]int{"BatchGetItem": 1, "UpdateItem": 3})
	relRetry := do(t, env, "POST", "/actions/k/uses/a/release", ``, "Idempotency-Key", "rel-a")
	if relRetry.Raw != rel.Raw || relRetry.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("keyed release retry: %s %v", relRetry.Raw, relRetry.Header)
	}
	env.Counter.Take()
	// After the release, the keyed take retried still replays its first
	// answer: it takes no second use.
	late := do(t, env, "POST", "/actions/k/consume", `{"useId":"a"}`, "Idempotency-Key", "take-a")
	expect(t, env, late, 200, "", update)
	if late.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("late keyed retry: %v", late.Header)
	}
	if late.Raw != first.Raw {
		t.Fatalf("keyed retry after release: %s, first %s", late.Raw, first.Raw)
	}
	if g := do(t, env, "GET", "/actions/k", ""); g.Body["usesHeld"] != 0.0 {
		t.Fatalf("the late keyed retry took a use: %s", g.Raw)
	}
	// Without the key, the released useId takes a use again: a new take.
	again := do(t, env, "POST", "/actions/k/consume", `{"useId":"a"}`)
	if again.Status != 200 || again.Str("usedAt") == first.Str("usedAt") && again.Raw == first.Raw {
		t.Fatalf("retake after release: %s", again.Raw)
	}
}

// TestUsesTenants: another tenant's multi-use action answers like one that
// does not exist, on every uses route, and is left as it was.
func TestUsesTenants(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, withTenants)
	if r := as(t, env, alpha, "POST", "/actions", `{"actionId":"seats","userId":"ua","maxUses":2,"releasable":true}`); r.Status != 201 {
		t.Fatal(r.Raw)
	}
	if r := as(t, env, alpha, "POST", "/actions/seats/consume", `{"useId":"d1"}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/actions/%s/consume", `{"useId":"d2"}`},
		{"POST", "/actions/%s/uses/d1/release", ``},
		{"GET", "/actions/%s/uses", ``},
		{"GET", "/actions/%s", ``},
	} {
		theirs := as(t, env, beta, tc.method, strings.Replace(tc.path, "%s", "seats", 1), tc.body)
		nobody := as(t, env, beta, tc.method, strings.Replace(tc.path, "%s", "nobody", 1), tc.body)
		if theirs.Status != 404 || requestIDField.ReplaceAllString(theirs.Raw, "") != requestIDField.ReplaceAllString(nobody.Raw, "") {
			t.Fatalf("%s %s as beta: %s, nobody's: %s", tc.method, tc.path, theirs.Raw, nobody.Raw)
		}
	}
	if g := as(t, env, alpha, "GET", "/actions/seats/uses", ""); !strings.Contains(g.Raw, `"useId":"d1"`) || strings.Contains(g.Raw, "d2") {
		t.Fatalf("alpha's uses after beta's tries: %s", g.Raw)
	}
}

// TestSameUseIDRace: 16 concurrent takes with one useId take one use and
// all answer the same 200; useIds shaped like attribute names or
// placeholders are uses like any other.
func TestSameUseIDRace(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"s","userId":"u","maxUses":8}`)
	var wg sync.WaitGroup
	bodies := make([]string, 16)
	for i := range bodies {
		wg.Go(func() {
			if r, err := testkit.Send(client, "POST", env.URL+"/actions/s/consume", `{"useId":"same"}`); err == nil && r.Status == 200 {
				bodies[i] = r.Raw
			}
		})
	}
	wg.Wait()
	for _, b := range bodies {
		if b == "" || b != bodies[0] {
			t.Fatalf("concurrent takes of one useId answered differently: %q", bodies)
		}
	}
	for _, id := range []string{"a0", "a1", "uses", "usesHeld", "maxUses", "x.y:z-1"} {
		if r := do(t, env, "POST", "/actions/s/consume", `{"useId":"`+id+`"}`, "Idempotency-Key", "k-"+id); r.Status != 200 || r.Str("useId") != id {
			t.Fatalf("take %s: %s", id, r.Raw)
		}
	}
	g := do(t, env, "GET", "/actions/s", "")
	l := do(t, env, "GET", "/actions/s/uses", "")
	if g.Body["usesHeld"] != 7.0 || g.Body["maxUses"] != 8.0 || len(l.Body["uses"].([]any)) != 7 {
		t.Fatalf("after 7 uses: %s / %s", g.Raw, l.Raw)
	}
}

// TestMultiUseCreateReplay: a keyed create retried after uses were taken
// replays its first 201 byte for byte (usesHeld 0), like a single-use
// create retried after its consume.
func TestMultiUseCreateReplay(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	body := `{"actionId":"cr","userId":"u","maxUses":3}`
	first := create(t, env, body, "Idempotency-Key", "create-cr")
	if r := do(t, env, "POST", "/actions/cr/consume", `{"useId":"d1"}`); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	again := do(t, env, "POST", "/actions", body, "Idempotency-Key", "create-cr")
	if again.Status != 201 || again.Raw != first.Raw || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("keyed create retry after a use:\n%s\nfirst:\n%s", again.Raw, first.Raw)
	}
}

// TestUserListShowsUseCounts: the user listing shows a multi-use action's
// maxUses, releasable and usesHeld, as GET does. Before the fix the
// listing's projection lacked those attributes and showed it as single use.
func TestUserListShowsUseCounts(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"lu","userId":"lu-user","maxUses":3,"releasable":true}`)
	do(t, env, "POST", "/actions/lu/consume", `{"useId":"a"}`)
	g := do(t, env, "GET", "/actions/lu", "")
	l := do(t, env, "GET", "/users/lu-user/actions", "")
	items, _ := l.Body["actions"].([]any)
	if len(items) != 1 {
		t.Fatalf("list: %s", l.Raw)
	}
	it := items[0].(map[string]any)
	for _, f := range []string{"maxUses", "releasable", "usesHeld", "usesRemaining"} {
		if g.Body[f] == nil || it[f] != g.Body[f] {
			t.Errorf("listed %s=%v, GET says %v; listed %s", f, it[f], g.Body[f], l.Raw)
		}
	}
}

// TestUnreadableGateIsNoFreeUse: a gate that cannot be read (its count
// damaged: not a number, or gone) holds uses all the same. Every path that
// takes, lists or cancels refuses to go on (500/503): none treats it as
// free. GET must not either: it answered usesHeld 0 and usesRemaining =
// maxUses for a gate holding every use, while takes are refused.
func TestUnreadableGateIsNoFreeUse(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for _, tc := range []struct {
		id string
		v  types.AttributeValue
	}{
		{"ug-str", &types.AttributeValueMemberS{Value: "two"}},
		{"ug-gone", nil},
	} {
		create(t, env, `{"actionId":"`+tc.id+`","userId":"u","maxUses":2}`)
		for _, u := range []string{"a", "b"} {
			if r := do(t, env, "POST", "/actions/"+tc.id+"/consume", `{"useId":"`+u+`"}`); r.Status != 200 {
				t.Fatal(r.Raw)
			}
		}
		setAttr(t, env, "ug#0#"+tc.id, "h", tc.v)
		take := do(t, env, "POST", "/actions/"+tc.id+"/consume", `{"useId":"c"}`)
		g := do(t, env, "GET", "/actions/"+tc.id, "")
		if take.Status == 200 {
			t.Errorf("%s: a take into the unreadable full gate succeeded: %s", tc.id, take.Raw)
		}
		if g.Status == 200 && g.Body["usesRemaining"] != 0.0 {
			t.Errorf("%s: GET shows %v uses remaining (usesHeld %v) on an action whose 2 uses are held and whose takes are refused (%d)",
				tc.id, g.Body["usesRemaining"], g.Body["usesHeld"], take.Status)
		}
	}
}

// TestHeldUseAnswersAfterCancelOrExpiry: "a useId takes at most one use,
// answered the same way forever after" (DESIGN.md); "sent again while it
// holds it, it answers the same 200 as its first take (its usedAt)"
// (docs/http-api.md). After a cancel (or expiresAt) the useId still holds
// its use (GET .../uses lists it; a keyed re-send replays the 200, and so
// did an instance whose cached action had not seen the cancel), but the
// same take sent again without a key (the client lost the first answer)
// answered 410, and so did a take with a new key. It answers its first
// 200; a useId holding no use is still refused.
func TestHeldUseAnswersAfterCancelOrExpiry(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct{ id, create string }{
		{"hc-cancel", `{"actionId":"hc-cancel","userId":"u","maxUses":3,"payload":{"k":"C-1"}}`},
		{"hc-cancel-rel", `{"actionId":"hc-cancel-rel","userId":"u","maxUses":3,"releasable":true,"payload":{"k":"C-2"}}`},
		{"hc-expiry", `{"actionId":"hc-expiry","userId":"u","maxUses":3,"expiresAt":"` + exp + `","payload":{"k":"C-3"}}`},
	} {
		create(t, env, tc.create)
		first := do(t, env, "POST", "/actions/"+tc.id+"/consume", `{"useId":"laptop"}`)
		if first.Status != 200 {
			t.Fatal(first.Raw)
		}
		if tc.id == "hc-expiry" {
			env.Shift(2 * time.Hour)
		} else if r := do(t, env, "POST", "/actions/"+tc.id+"/cancel", `{}`); r.Status != 200 {
			t.Fatal(r.Raw)
		}
		list := do(t, env, "GET", "/actions/"+tc.id+"/uses", "")
		again := do(t, env, "POST", "/actions/"+tc.id+"/consume", `{"useId":"laptop"}`)
		env.Shift(0)
		if again.Raw != first.Raw {
			t.Errorf("%s: the useId still holds its use (listed: %s), sent again it answers %d %s; first %s",
				tc.id, list.Raw, again.Status, again.Raw, first.Raw)
		}
		// With a key too, new or re-sent: the same 200 (Idempotent-Replayed
		// on the key's re-send, as on an open action), and a useId that
		// holds no use is refused.
		if tc.id == "hc-expiry" {
			env.Shift(2 * time.Hour)
		}
		for i, replayed := range []string{"", "true"} {
			keyed := do(t, env, "POST", "/actions/"+tc.id+"/consume", `{"useId":"laptop"}`, "Idempotency-Key", "late-"+tc.id)
			if keyed.Raw != first.Raw || keyed.Header.Get("Idempotent-Replayed") != replayed {
				t.Errorf("%s: a keyed take (send %d) of the useId that holds its use: %d %s (replayed %q); first %s",
					tc.id, i+1, keyed.Status, keyed.Raw, keyed.Header.Get("Idempotent-Replayed"), first.Raw)
			}
		}
		for _, key := range [][]string{nil, {"Idempotency-Key", "none-" + tc.id}} {
			if r := do(t, env, "POST", "/actions/"+tc.id+"/consume", `{"useId":"phone"}`, key...); r.Status != 410 {
				t.Errorf("%s %v: a useId that holds no use, once the action is closed: %d %s", tc.id, key, r.Status, r.Raw)
			}
		}
		env.Shift(0)
	}
}
