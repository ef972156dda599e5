package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/sweep"
)

// sweeperCost is what the expiry sweeper costs, measured on its own table.
type sweeperCost struct {
	Actions int `json:"actionsPerScenario"`
	// Per action that expires open: the requests and units of every sweep
	// (a minute apart, as deployed) until none reads its entry again.
	Expiring sweepUse `json:"perExpiringAction"`
	// Per action consumed before it fell due: its entry stays in the
	// index, so the sweeper reads it once (more if within the settle time).
	Finished sweepUse `json:"perFinishedAction"`
	// One sweep with nothing due.
	Idle sweepUse `json:"idleRun"`

	// Purge is, per item deleted, the daily purge of a multi-Region (MRSC)
	// table, which has no TTL: its Scan (read units of every item it reads:
	// here every item was due) and one conditional DeleteItem, with the
	// item's index entries. Per Region that runs it; a replicated delete is
	// billed in every replica Region.
	Purge sweepUse `json:"perPurgedItem"`

	DollarsPerMillionExpiring float64 `json:"dollarsPerMillionExpiring"`
	DollarsPerMillionPurged   float64 `json:"dollarsPerMillionPurged"`
	DollarsPerMillionFinished float64 `json:"dollarsPerMillionFinished"`
	DollarsPerIdleHour        float64 `json:"dollarsPerIdleHour"`
}

type sweepUse struct {
	Requests    map[string]float64 `json:"requests"`
	WriteUnits  float64            `json:"writeUnits"`
	IndexWrites float64            `json:"indexWriteUnits"`
	ReadUnits   float64            `json:"readUnits"` // at least 0.5 per read request, as DynamoDB bills
	RunMs       float64            `json:"runMs"`     // sweeper wall time (DynamoDB Local)
}

// sweeperCosts measures the sweeper: n actions expiring in one minute and
// left open, n more expiring in another minute but consumed first, each
// swept by runs a minute apart until nothing is read again; then an idle run
// (make bench: 1,000 each; make test, which only checks the counts: 200).
func sweeperCosts(t *testing.T, env *testkit.Env, n int) sweeperCost {
	ctx := context.Background()
	table := env.Table + "-sweep"
	plain := dynamodb.NewFromConfig(awsconfig.Local(testkit.DynamoDB(t)))
	if err := store.CreateTable(ctx, plain, table, false); err != nil {
		t.Fatal(err)
	}
	setup := store.New(plain, table, store.Options{})
	cfg := awsconfig.Local(testkit.DynamoDB(t))
	counter := testkit.NewCounter(cfg.HTTPClient)
	cfg.HTTPClient = counter
	capacity := testkit.NewCapacity()
	capacity.Attach(&cfg)
	st := store.New(dynamodb.NewFromConfig(cfg), table, store.Options{})

	minuteA := action.Millis(time.Now().Add(time.Hour)).Truncate(time.Minute)
	minuteB := minuteA.Add(30 * time.Minute)
	now := action.Millis(time.Now())
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range 2 * n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			id, exp := fmt.Sprintf("sw-%05d", i), minuteA.Add(time.Duration(i)*60*time.Millisecond)
			if i >= n {
				exp = minuteB.Add(time.Duration(i-n) * 60 * time.Millisecond)
			}
			if _, err := setup.Create(ctx, &action.Action{ID: id, UserID: "u", CreatedAt: now, ActiveAt: now, ExpiresAt: exp}, nil); err != nil {
				t.Error(err)
				return
			}
			if i >= n {
				if _, err := setup.Consume(ctx, id, store.Consume{Now: now}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()

	// measure runs sweeps at each of the times and sums what they used.
	measure := func(want int, times ...time.Time) sweepUse {
		counter.Take()
		capacity.Take()
		var ms float64
		expired := 0
		for _, at := range times {
			// A generous budget: a run cut short by DynamoDB Local's pace
			// would lose the answers of its last writes and blur the counts.
			r, err := (&sweep.Sweeper{Store: st, Budget: 5 * time.Minute, Now: func() time.Time { return at }}).Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("sweep at %s: %+v", at.Format(time.TimeOnly), r)
			ms += float64(r.DurationMs)
			expired += r.Expired
		}
		if expired != want {
			t.Errorf("sweeps at %v expired %d, want %d", times, expired, want)
		}
		u := sweepUse{Requests: map[string]float64{}, RunMs: ms}
		ops := counter.Take()
		for op, units := range capacity.Take() {
			switch op {
			case "UpdateItem":
				u.WriteUnits += units.Table
				u.IndexWrites += units.Index
			case "GetItem", "Query":
				u.ReadUnits += max(units.Table+units.Index, 0.5*float64(ops[op]))
			default:
				u.ReadUnits += units.Table + units.Index
			}
		}
		for op, c := range ops {
			u.Requests[op] = float64(c)
		}
		return u
	}
	per := func(u sweepUse, k int) sweepUse {
		out := sweepUse{Requests: map[string]float64{}, WriteUnits: u.WriteUnits / float64(k), IndexWrites: u.IndexWrites / float64(k),
			ReadUnits: u.ReadUnits / float64(k), RunMs: u.RunMs / float64(k)}
		for op, c := range u.Requests {
			out.Requests[op] = c / float64(k)
		}
		return out
	}
	c := sweeperCost{Actions: n}
	c.Expiring = per(measure(n, minuteA.Add(time.Minute), minuteA.Add(2*time.Minute), minuteA.Add(3*time.Minute)), n)
	c.Finished = per(measure(0, minuteB.Add(time.Minute), minuteB.Add(2*time.Minute), minuteB.Add(3*time.Minute)), n)
	c.Idle = measure(0, minuteB.Add(10*time.Minute))

	// The purge: every action of both scenarios is finished; one run past
	// their retention deletes each with one conditional DeleteItem.
	counter.Take()
	capacity.Take()
	pr, err := (&sweep.Purger{Store: st, Budget: 5 * time.Minute, Now: func() time.Time { return minuteB.Add(store.DefaultRetention + time.Hour) }}).Run(ctx)
	if err != nil || pr.Deleted != 2*n {
		t.Errorf("purge: %+v %v, want %d deleted", pr, err, 2*n)
	}
	t.Logf("purge: %+v", pr)
	pu := sweepUse{Requests: map[string]float64{}, ReadUnits: pr.ReadUnits, RunMs: float64(pr.DurationMs)}
	for op, c := range counter.Take() {
		pu.Requests[op] = float64(c)
	}
	del := capacity.Take()["DeleteItem"]
	pu.WriteUnits, pu.IndexWrites = del.Table, del.Index
	c.Purge = per(pu, max(pr.Deleted, 1))

	gbs := 0.256 * Prices.LambdaPerGBSecondARM // per second of a 256 MB sweeper
	dollars := func(u sweepUse) float64 {
		return u.WriteUnits*Prices.DynamoWRUPerMillion/1e6 + u.ReadUnits*Prices.DynamoRRUPerMillion/1e6 + u.RunMs/1000*gbs
	}
	c.DollarsPerMillionExpiring = round(dollars(c.Expiring)*1e6+Prices.EventBridgePerMillion, 3) // + its action.expired event
	c.DollarsPerMillionFinished = round(dollars(c.Finished)*1e6, 3)
	c.DollarsPerMillionPurged = round((dollars(c.Purge)+c.Purge.IndexWrites*Prices.DynamoWRUPerMillion/1e6)*1e6, 3)
	c.DollarsPerIdleHour = round(60*(dollars(c.Idle)+Prices.LambdaPerMillion/1e6), 6)
	return c
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
