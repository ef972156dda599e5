package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/store"
)

// usesReport is what a multi-use action costs: write units of one take
// and one release by how many uses the item already holds (DynamoDB bills
// a write by the larger of the item before and after it, in 1 KB units),
// and the hot item: many clients racing for one action's uses.
type usesReport struct {
	UseIDBytes int          `json:"useIdBytes"`
	Rows       []useCostRow `json:"byUsesHeld"`
	Hot        hotItem      `json:"hotItem"`
}

type useCostRow struct {
	Held         int     `json:"usesHeld"` // after the take, before the release
	TakeUnits    float64 `json:"takeWriteUnits"`
	ReleaseUnits float64 `json:"releaseWriteUnits"`
	DollarsPerM  float64 `json:"dollarsPerMillionTakes"` // the take's write units at the on-demand price
}

type hotItem struct {
	MaxUses, Clients, Takes, Refused, Held int
	TakesPerSecond                         float64
}

// usesOutcomes adds the multi-use routes to requestsPerOutcome: one
// request per take, replay, refusal and release.
func usesOutcomes(t *testing.T, env *testkit.Env, call func(route, outcome, method, path, body string, headers ...string) *testkit.Response) {
	testkit.Do(t, nil, "POST", env.URL+"/actions", `{"actionId":"m1","userId":"u","maxUses":2,"releasable":true}`)
	const consume, release = "POST /actions/{actionId}/consume", "POST /actions/{actionId}/uses/{useId}/release"
	call(consume, "used (useId d1)", "POST", "/actions/m1/consume", `{"useId":"d1"}`, "Idempotency-Key", "m1")
	call(consume, "replayed (useId d1 again)", "POST", "/actions/m1/consume", `{"useId":"d1"}`)
	call(consume, "replayed (keyed retry)", "POST", "/actions/m1/consume", `{"useId":"d1"}`, "Idempotency-Key", "m1")
	call(consume, "idempotency_key_reused (the key on another useId)", "POST", "/actions/m1/consume", `{"useId":"d9"}`, "Idempotency-Key", "m1")
	call(consume, "used (useId d2)", "POST", "/actions/m1/consume", `{"useId":"d2"}`)
	call(consume, "no_uses_left", "POST", "/actions/m1/consume", `{"useId":"d3"}`)
	call(consume, "invalid_request (no useId on a multi-use action: the failed write tells)", "POST", "/actions/m1/consume", `{}`)
	call(release, "released", "POST", "/actions/m1/uses/d1/release", ``)
	call(release, "already_released", "POST", "/actions/m1/uses/d1/release", ``)
	call(release, "use_not_found", "POST", "/actions/m1/uses/nobody/release", ``)
	call(release, "not_releasable (a single-use action)", "POST", "/actions/r1/uses/d1/release", ``)
	call("GET /actions/{actionId}/uses", "ok", "GET", "/actions/m1/uses", "")
}

// usesCost measures the take that brings the uses held to each of sizes,
// and the release from there (36-byte useIds, no Idempotency-Key), and the
// hot item.
func usesCost(t *testing.T, env *testkit.Env, sizes ...int) usesReport {
	ctx := context.Background()
	cfg := config.Local(testkit.Endpoint)
	capacity := testkit.NewCapacity()
	capacity.Attach(&cfg)
	st := store.New(dynamodb.NewFromConfig(cfg), env.Table, store.Options{})
	now := time.Now()
	useID := func(i int) string { return fmt.Sprintf("device-%029d", i) } // 36 bytes, a UUID's length
	out := usesReport{UseIDBytes: len(useID(0))}
	a := &action.Action{ID: "uses-cost", UserID: "u", ActiveAt: action.Millis(now.Add(-time.Minute)), ExpiresAt: action.Millis(now.Add(time.Hour)),
		CreatedAt: action.Millis(now), MaxUses: action.MaxUsesLimit, Releasable: true}
	if _, err := st.Create(ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	take := func(i int) {
		if _, err := st.Take(ctx, a.ID, store.Take{UseID: useID(i), Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	held := 0
	for _, n := range sizes {
		for ; held < n-1; held++ {
			take(held)
		}
		capacity.Take()
		take(held) // measured: the take of use n
		row := useCostRow{Held: n, TakeUnits: units(capacity.Take())}
		if _, err := st.Release(ctx, a.ID, store.Release{UseID: useID(held), Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		row.ReleaseUnits = units(capacity.Take())
		take(held) // held again (a retake after the release), not measured
		held++
		row.DollarsPerM = row.TakeUnits * Prices.DynamoWRUPerMillion
		out.Rows = append(out.Rows, row)
	}
	out.Hot = hot(t, st)
	return out
}

func units(ops map[string]testkit.Units) float64 {
	w, _, _ := splitUnits(ops)
	return w
}

// hot races 64 clients, each with its own useIds, for the 100 uses of one
// action until none is left, and checks that exactly 100 were taken.
func hot(t *testing.T, st *store.Store) hotItem {
	ctx := context.Background()
	now := time.Now()
	h := hotItem{MaxUses: 100, Clients: 64}
	a := &action.Action{ID: "hot", UserID: "u", ActiveAt: action.Millis(now.Add(-time.Minute)), ExpiresAt: action.Millis(now.Add(time.Hour)),
		CreatedAt: action.Millis(now), MaxUses: h.MaxUses}
	if _, err := st.Create(ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for c := range h.Clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				_, err := st.Take(ctx, a.ID, store.Take{UseID: fmt.Sprintf("c%d-%d", c, i), Now: time.Now()})
				mu.Lock()
				if err == nil {
					h.Takes++
				} else {
					h.Refused++
				}
				mu.Unlock()
				if err != nil {
					if rej, ok := err.(*action.Rejection); !ok || rej.Code != action.CodeNoUsesLeft {
						t.Errorf("hot item: %v", err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	h.TakesPerSecond = float64(h.Takes+h.Refused) / time.Since(start).Seconds()
	got, err := st.Get(ctx, "", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	h.Held = got.UsesHeld
	if h.Takes != h.MaxUses || h.Held != h.MaxUses || len(got.HeldUses()) != h.MaxUses {
		t.Errorf("hot item: %d takes answered, %d held, %d stored; want %d", h.Takes, h.Held, len(got.HeldUses()), h.MaxUses)
	}
	return h
}

func (u usesReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Multi-use actions: write units of one use by uses held (%d-byte useIds, no Idempotency-Key; $%.3f per million write units)\n\n", u.UseIDBytes, Prices.DynamoWRUPerMillion)
	b.WriteString("| uses held (after the take) | take (write units) | release (write units) | $ per million takes |\n|---|---|---|---|\n")
	for _, r := range u.Rows {
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f |\n", r.Held, r.TakeUnits, r.ReleaseUnits, r.DollarsPerM)
	}
	h := u.Hot
	fmt.Fprintf(&b, "\nHot item: %d clients racing for the %d uses of one action: %d taken, %d refused (no_uses_left), %d held at the end; %.0f requests/s on DynamoDB Local.\n",
		h.Clients, h.MaxUses, h.Takes, h.Refused, h.Held, h.TakesPerSecond)
	return b.String()
}

// TestUsesCost prints what a multi-use action's use costs by item size (up
// to 100 uses; make bench's TestReport goes to 1,000) and the hot item.
func TestUsesCost(t *testing.T) {
	env := testkit.NewEnv(t)
	u := usesCost(t, env, 1, 10, 100)
	for i := 1; i < len(u.Rows); i++ {
		if u.Rows[i].TakeUnits < u.Rows[i-1].TakeUnits {
			t.Errorf("a take got cheaper as the item grew: %+v", u.Rows)
		}
	}
	t.Log(u.markdown())
}
