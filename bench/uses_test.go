package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/dynamodblocal"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/store"
)

// usesReport is what a multi-use action costs: the write and read units of
// one take and one release by how many uses the action already holds, and
// the hot action: one action's takes, spread over its gates, against a
// per-item write limit.
type usesReport struct {
	UseIDBytes int          `json:"useIdBytes"`
	Rows       []useCostRow `json:"byUsesHeld"`
	Hot        hotAction    `json:"hotAction"`
}

type useCostRow struct {
	Held         int     `json:"usesHeld"` // before the take
	TakeUnits    float64 `json:"takeWriteUnits"`
	TakeReads    float64 `json:"takeReadUnits"`
	ReleaseUnits float64 `json:"releaseWriteUnits"`
	DollarsPerM  float64 `json:"dollarsPerMillionTakes"` // the take's units at the on-demand prices
}

// hotAction is one action's takes under a per-item write limit.
type hotAction struct {
	MaxUses, Clients, Takes, Refused, Held int
	Resent                                 int     // takes the callers sent again after a 503 (throttled past the SDK's attempts)
	ItemLimit                              float64 // writes per second any one item takes
	TakesPerSecond                         float64
	Ratio                                  float64 // TakesPerSecond / ItemLimit: above 1, the action is spread beyond one item
	Throttled                              int64   // writes the limit refused (retried by the SDK)
}

// usesOutcomes adds the multi-use routes to requestsPerOutcome, each with
// the requests it may take (usesLimits). A take is its call's record and
// one gate write; the first take of an action on an instance also reads the
// action (its create-time fields are then kept); a release reads the gate
// (which take holds the use), stamps the take's record, then writes the
// gate; a keyed release records itself before the stamp.
func usesOutcomes(t *testing.T, env *testkit.Env, call func(route, outcome, method, path, body string, headers ...string) *testkit.Response) {
	testkit.Do(t, nil, "POST", env.URL+"/actions", `{"actionId":"m1","userId":"u","maxUses":2,"releasable":true}`)
	for _, u := range usesRows {
		call(u.route, u.outcome, u.method, u.path, u.body, u.headers...)
	}
}

// usesRows are the multi-use calls of the report, in order, with the
// DynamoDB requests each may take (docs/http-api.md, "Multi-use actions").
var usesRows = []struct {
	route, outcome, method, path, body string
	headers                            []string
	limit                              int
}{
	{usesConsume, "used (useId d1; the instance's first take of the action: GetItem + record + gate)", "POST", "/actions/m1/consume", `{"useId":"d1"}`, []string{"Idempotency-Key", "m1"}, 3},
	{usesConsume, "replayed (useId d1 again: record + gate)", "POST", "/actions/m1/consume", `{"useId":"d1"}`, nil, 2},
	{usesConsume, "replayed (keyed re-send: its record + a read of the gate)", "POST", "/actions/m1/consume", `{"useId":"d1"}`, []string{"Idempotency-Key", "m1"}, 2},
	{usesConsume, "idempotency_key_reused (the key on another useId: its record)", "POST", "/actions/m1/consume", `{"useId":"d9"}`, []string{"Idempotency-Key", "m1"}, 1},
	{usesConsume, "used (useId d2: record + gate)", "POST", "/actions/m1/consume", `{"useId":"d2"}`, nil, 2},
	{usesConsume, "no_uses_left (record + gate)", "POST", "/actions/m1/consume", `{"useId":"d3"}`, nil, 2},
	{usesConsume, "invalid_request (no useId on a multi-use action: the failed write tells)", "POST", "/actions/m1/consume", `{}`, nil, 1},
	{usesRelease, "released (a read of the gate + the take's record + gate)", "POST", "/actions/m1/uses/d1/release", ``, nil, 3},
	{usesRelease, "released (keyed: a read of the gate + its record + the take's record + gate)", "POST", "/actions/m1/uses/d2/release", ``, []string{"Idempotency-Key", "r2"}, 4},
	{usesRelease, "replayed (keyed re-send: a read of the gate + its record + the take's record)", "POST", "/actions/m1/uses/d2/release", ``, []string{"Idempotency-Key", "r2"}, 3},
	{usesRelease, "use_not_found (released already: a read of the gate)", "POST", "/actions/m1/uses/d1/release", ``, nil, 1},
	{usesRelease, "use_not_found (never taken: a read of the gate)", "POST", "/actions/m1/uses/nobody/release", ``, nil, 1},
	{usesRelease, "not_releasable (a single-use action: its read)", "POST", "/actions/r1/uses/d1/release", ``, nil, 1},
	{usesConsume, "used (useId d4, after the releases: record + gate)", "POST", "/actions/m1/consume", `{"useId":"d4"}`, nil, 2},
	{"GET /actions/{actionId}", "ok (a multi-use action: GetItem + its gates)", "GET", "/actions/m1", "", nil, 2},
	{"GET /actions/{actionId}/uses", "ok (GetItem + its gates + their records)", "GET", "/actions/m1/uses", "", nil, 3},
}

const usesConsume, usesRelease = "POST /actions/{actionId}/consume", "POST /actions/{actionId}/uses/{useId}/release"

// usesLimit is the requests a multi-use row of the report may take.
func usesLimit(route, outcome string) (int, bool) {
	for _, u := range usesRows {
		if u.route == route && u.outcome == outcome {
			return u.limit, true
		}
	}
	return 0, false
}

// hotWithin bounds one hot race.
const hotWithin = 10 * time.Minute

// ownTable creates a table for one step of the bench on endpoint, without
// its stream, and returns it with the function that drops it, which the
// step calls when it ends. Nothing reads these steps' streams, and DynamoDB
// Local reads a table's whole stream to describe it, on every write: after
// the 100,000-use fill its one SQLite thread spent minutes per second of
// takes in getStreamDescription (a jstack of the hot step that never ended;
// store.CreateTable).
func ownTable(t *testing.T, endpoint, name string) (string, func()) {
	t.Helper()
	db := dynamodb.NewFromConfig(awsconfig.Local(endpoint))
	if err := store.CreateTable(context.Background(), db, name, false); err != nil {
		t.Fatal(err)
	}
	return name, func() {
		if _, err := db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil {
			t.Logf("dropping %s: %v", name, err)
		}
	}
}

// ownDynamoDB starts a DynamoDB Local for one multi-use step of make bench
// alone (with the JVM's default compilers: the step is timed), and the
// function that stops it: on the one the earlier steps filled (and their
// streams), the 100,000-use fill ran at a few takes a second beside make
// test and reached the bench's timeout. An endpoint given to the tests is
// used as it is (dynamodblocal.ForTests).
func ownDynamoDB(t *testing.T) (string, func()) {
	t.Helper()
	endpoint, stop, err := dynamodblocal.ForTests(dynamodblocal.Options{SteadyState: true})
	if err != nil {
		t.Fatal(err)
	}
	return endpoint, stop
}

// usesCost measures the take of one more use, and its release, when an
// action of a million uses holds each of sizes (36-byte useIds, a keyed
// take: its record and its gate), the uses before it taken 32 at a time.
func usesCost(t *testing.T, endpoint string, sizes ...int) usesReport {
	ctx := context.Background()
	cfg := awsconfig.Local(endpoint)
	capacity := testkit.NewCapacity()
	capacity.Attach(&cfg)
	table, drop := ownTable(t, endpoint, "uses-"+strings.ReplaceAll(t.Name(), "/", "-"))
	defer drop()
	st := store.New(dynamodb.NewFromConfig(cfg), table, store.Options{})
	now := time.Now()
	useID := func(i int) string { return fmt.Sprintf("device-%029d", i) } // 36 bytes, a UUID's length
	out := usesReport{UseIDBytes: len(useID(0))}
	a := &action.Action{ID: "uses-cost", UserID: "u", ActiveAt: action.Millis(now.Add(-time.Minute)), ExpiresAt: action.Millis(now.Add(time.Hour)),
		CreatedAt: action.Millis(now), MaxUses: action.MaxUsesLimit, Releasable: true}
	if _, err := st.Create(ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	take := func(i int) error {
		w := action.Write{Key: fmt.Sprintf("%064x", i), Fingerprint: "kid:" + strings.Repeat("f", 64)}
		_, err := st.Take(ctx, a.ID, store.Take{UseID: useID(i), Write: w, Fingerprints: []string{w.Fingerprint}, Now: time.Now()})
		return err
	}
	held := 0
	for _, n := range sizes {
		var wg sync.WaitGroup
		var failed atomic.Value
		sem := make(chan struct{}, 32)
		for ; held < n; held++ {
			sem <- struct{}{}
			i := held
			wg.Go(func() {
				defer func() { <-sem }()
				if err := take(i); err != nil {
					failed.Store(err)
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			t.Fatalf("filling to %d uses: %v", n, err)
		}
		if got, err := st.Get(ctx, "", a.ID); err != nil || got.UsesHeld != n {
			t.Fatalf("holding %d uses: %v, %v", n, got, err)
		}
		capacity.Take()
		one := 2*action.MaxUsesLimit + n  // a useId and key of its own
		if err := take(one); err != nil { // measured: one more take
			t.Fatal(err)
		}
		w, _, r := splitUnits(capacity.Take())
		row := useCostRow{Held: n, TakeUnits: w, TakeReads: r}
		if _, err := st.Release(ctx, a.ID, store.Release{UseID: useID(one), Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		row.ReleaseUnits = units(capacity.Take())
		row.DollarsPerM = w*Prices.DynamoWRUPerMillion + r*Prices.DynamoRRUPerMillion
		out.Rows = append(out.Rows, row)
	}
	return out
}

func units(ops map[string]testkit.Units) float64 {
	w, _, _ := splitUnits(ops)
	return w
}

// hot races clients, each with its own useIds, for the maxUses uses of one
// action until none is left, while DynamoDB (through the fault proxy) takes
// at most itemLimit writes a second to any one item, as a partition takes
// at most 1,000: exactly maxUses must be taken, and the action serves
// TakesPerSecond / itemLimit times what one item could.
func hot(t *testing.T, endpoint string, maxUses, clients int, itemLimit float64) hotAction {
	ctx := context.Background()
	p, err := faults.Start(endpoint, faults.Rates{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg := awsconfig.Local(p.URL)
	cfg.Retryer = func() aws.Retryer { // throttled writes back off and retry, as the SDK does (without its retry quota: one client stands for many Lambdas here)
		return retry.AddWithMaxAttempts(retry.AddWithMaxBackoffDelay(retry.NewStandard(func(o *retry.StandardOptions) { o.RateLimiter = ratelimit.None }), 100*time.Millisecond), 20)
	}
	db := dynamodb.NewFromConfig(cfg)
	table, drop := ownTable(t, endpoint, fmt.Sprintf("hot-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), int(itemLimit*10)))
	defer drop()
	st := store.New(db, table, store.Options{})
	now := time.Now()
	h := hotAction{MaxUses: maxUses, Clients: clients, ItemLimit: itemLimit}
	a := &action.Action{ID: fmt.Sprintf("hot-%d-%d", maxUses, int(itemLimit*10)), UserID: "u", ActiveAt: action.Millis(now.Add(-time.Minute)), ExpiresAt: action.Millis(now.Add(time.Hour)),
		CreatedAt: action.Millis(now), MaxUses: maxUses}
	if _, err := st.Create(ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Take(ctx, a.ID, store.Take{UseID: "warm", Now: time.Now()}); err != nil { // the instance reads the action once
		t.Fatal(err)
	}
	if itemLimit > 0 {
		p.LimitItemWrites(itemLimit)
	}
	var taken, refused, resent atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	// A bound on the race, so that a DynamoDB Local that stops answering
	// fails the bench with what it had done instead of holding it to the
	// test's timeout (3,000 takes take seconds here, even throttled).
	ctx, cancel := context.WithTimeout(ctx, hotWithin)
	defer cancel()
	for c := range clients {
		wg.Go(func() {
			for i, try := 0, 0; ; {
				_, err := st.Take(ctx, a.ID, store.Take{UseID: fmt.Sprintf("c%d-%d", c, i), Now: time.Now()})
				var rej *action.Rejection
				switch {
				case err == nil:
					taken.Add(1)
					i, try = i+1, 0
					continue
				case ctx.Err() != nil: // the race's bound: reported once, below
				case errors.Is(err, store.ErrUnavailable) && try < 20:
					// Throttled past the SDK's attempts: the API answers 503
					// and the caller sends the same useId again (a useId
					// holds one use: a re-send never takes a second).
					resent.Add(1)
					try++
					continue
				case errors.As(err, &rej) && rej.Code == action.CodeNoUsesLeft:
					refused.Add(1)
				default:
					t.Errorf("hot action: %v", err)
				}
				return
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	p.LimitItemWrites(0)
	if ctx.Err() != nil {
		t.Fatalf("hot action: %d of %d uses taken when the race reached its bound of %s (%d writes throttled, %d takes sent again)",
			taken.Load()+1, maxUses, hotWithin, p.Counts().HotItem, resent.Load())
	}
	h.Takes, h.Refused, h.Throttled, h.Resent = int(taken.Load())+1, int(refused.Load()), p.Counts().HotItem, int(resent.Load())
	h.TakesPerSecond = float64(h.Takes-1) / el.Seconds()
	if itemLimit > 0 {
		h.Ratio = h.TakesPerSecond / itemLimit
	}
	got, err := st.Get(ctx, "", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	h.Held = got.UsesHeld
	if h.Takes != maxUses || h.Held != maxUses || h.Refused != clients {
		t.Errorf("hot action: %d takes answered, %d held, %d refused; want %d, %d, %d", h.Takes, h.Held, h.Refused, maxUses, maxUses, clients)
	}
	return h
}

func (u usesReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Multi-use actions: one take and one release by uses held (an action of %d uses; %d-byte useIds, keyed takes; $%.3f per million write units, $%.3f per million read units)\n\n",
		action.MaxUsesLimit, u.UseIDBytes, Prices.DynamoWRUPerMillion, Prices.DynamoRRUPerMillion)
	b.WriteString("| uses held (before the take) | take (write units) | take (read units) | release (write units) | $ per million takes |\n|---|---|---|---|---|\n")
	for _, r := range u.Rows {
		fmt.Fprintf(&b, "| %d | %.0f | %.1f | %.0f | %.2f |\n", r.Held, r.TakeUnits, r.TakeReads, r.ReleaseUnits, r.DollarsPerM)
	}
	h := u.Hot
	if h.Takes == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "\nHot action: %d clients racing for the %d uses of one action while no item takes more than %.0f writes/s (the fault proxy answers a hot item as DynamoDB does): %d taken, %d refused (no_uses_left), %d held at the end, %d writes throttled and retried by the SDK, %d takes sent again by their callers after a 503; %.0f takes/s = %.1f× what one item allows.\n",
		h.Clients, h.MaxUses, h.ItemLimit, h.Takes, h.Refused, h.Held, h.Throttled, h.Resent, h.TakesPerSecond, h.Ratio)
	return b.String()
}

// TestUsesCost: a take and a release cost the same write units at 1 and
// 200 uses held (make bench's TestReport goes to 100,000 and prints the
// hot action under a limit of 100 writes/s per item), and one action is not
// bound by one item's write limit: on this machine, whatever its speed,
// with the limit set 20 times below what the machine takes unthrottled,
// the action still serves at least 5 times the limit, exactly its uses.
func TestUsesCost(t *testing.T) {
	endpoint := testkit.DynamoDB(t)
	u := usesCost(t, endpoint, 1, 200)
	free := hot(t, endpoint, 1200, 64, 0)
	limit := max(1, free.TakesPerSecond/20)
	u.Hot = hot(t, endpoint, 1200, 64, limit)
	t.Log(u.markdown())
	t.Logf("unthrottled: %.0f takes/s; with every item held to %.1f writes/s: %.0f takes/s (%.1f× the limit)", free.TakesPerSecond, limit, u.Hot.TakesPerSecond, u.Hot.Ratio)
	for _, r := range u.Rows {
		if r.TakeUnits != u.Rows[0].TakeUnits || r.TakeUnits > 2 || r.ReleaseUnits > 2 {
			t.Errorf("at %d uses held a take costs %.1f write units and a release %.1f: want at most 2, the same at any N", r.Held, r.TakeUnits, r.ReleaseUnits)
		}
	}
	if u.Hot.Ratio < 5 {
		t.Errorf("one action served %.1f× what one item allows, want at least 5×", u.Hot.Ratio)
	}
}
