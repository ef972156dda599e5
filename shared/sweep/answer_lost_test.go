package sweep_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/sweep"
)

// TestExpireAnswerLostIsCountedAsExpired: the sweep's Expire write applies
// and its answer is lost; the SDK sends it again, and the re-send finds the
// action expired by that very write. The run marked it: its Result and its
// ActionsExpired metric say so, not "finished by someone else".
func TestExpireAnswerLostIsCountedAsExpired(t *testing.T) {
	t.Parallel()
	p, env := behindFaults(t, "UpdateItem", func(o *server.Options) { o.ExpiryShards = 1 })
	expiresAt := action.Millis(time.Now().Add(time.Hour))
	id := fmt.Sprintf("lost-%d", time.Now().UnixNano()) // the table outlives a run (-count)
	create(t, env, id, expiresAt)
	p.PassThenDrop(0, 1) // the Expire write applies, its answer is lost
	at := expiresAt.Add(time.Second)
	env.Sweeper.Now = func() time.Time { return at }
	r, err := env.Sweeper.Run(context.Background())
	p.PassThenDrop(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := env.Sweeper.Store.Get(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	if !a.ExpiredAt.Equal(at) {
		t.Fatalf("expiredAt %v, want the sweep's %v (faults: %s)", a.ExpiredAt, at, p)
	}
	if p.Counts().Dropped != 1 {
		t.Fatalf("no answer was lost: %s", p)
	}
	// (Finished counts only what earlier runs of the test left, -count.)
	if r.Expired != 1 || r.Finished != r.Due-1 || r.MaxLagMs != 1000 {
		t.Errorf("sweep %+v: it marked the action expired itself (its answer lost and re-sent), want expired 1, lag 1000 ms", r)
	}
	for _, tot := range env.Metrics.Totals() {
		if tot.Dimensions["Function"] == "sweeper" && tot.Metric == "ActionsExpired" && tot.Sum != 1 {
			t.Errorf("ActionsExpired %v, want 1", tot.Sum)
		}
	}
}

// TestPurgeAnswerLostIsCountedAsDeleted: the purge's DeleteItem of a
// finished action applies and its answer is lost; the SDK sends it again
// and the re-send finds the item gone. The run deleted it: its result (and
// ItemsPurged) says deleted, not kept.
func TestPurgeAnswerLostIsCountedAsDeleted(t *testing.T) {
	t.Parallel()
	p, env := behindFaults(t, "DeleteItem", func(o *server.Options) { o.Retention = time.Hour })
	now := time.Now()
	id := fmt.Sprintf("done-%d", now.UnixNano()) // the table outlives a run (-count)
	create(t, env, id, now.Add(time.Hour))
	if r := testkit.Do(t, nil, "POST", env.URL+"/actions/"+id+"/consume", ""); r.Status != 200 {
		t.Fatalf("consume: %d %s", r.Status, r.Raw)
	}
	p.PassThenDrop(0, 1) // the delete applies, its answer is lost
	pr := &sweep.Purger{Store: env.Sweeper.Store, Segments: 1, Now: func() time.Time { return now.Add(3 * time.Hour) }}
	r, err := pr.Run(context.Background())
	p.PassThenDrop(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Counts().Dropped != 1 {
		t.Fatalf("no answer was lost: %s", p)
	}
	if _, err := env.Sweeper.Store.Get(context.Background(), "", id); err == nil {
		t.Fatal("the consumed action was not deleted")
	}
	if r.Deleted != 1 || r.Kept != 0 {
		t.Errorf("purge %+v: it deleted the item itself (its answer lost and re-sent), want deleted 1, kept 0", r)
	}
}

// TestPurgeConflictingWithAnotherRegionsIsNotCounted: on a multi-Region
// table two Regions' purges find the same finished action. Region A's
// delete lands; Region B's meets it as a write conflict (nothing applied)
// and the SDK sends it again, to find the item gone. B deleted nothing: it
// reports the item kept ("gone already"), so ItemsPurged summed over the
// Regions counts the item once. Before, any re-send whose refusal found no
// item counted as this run's own delete: B reported it deleted too
// (helper-44: 2 for 1 item).
func TestPurgeConflictingWithAnotherRegionsIsNotCounted(t *testing.T) {
	t.Parallel()
	retention := func(o *server.Options) { o.Retention = time.Hour }
	p, b := behindFaults(t, "DeleteItem", retention) // Region B's purger
	a := testkit.NewEnv(t, retention)                // Region A's, on the same table
	now := time.Now()
	id := fmt.Sprintf("done-%d", now.UnixNano()) // the table outlives a run (-count)
	create(t, a, id, now.Add(time.Hour))
	if r := testkit.Do(t, nil, "POST", a.URL+"/actions/"+id+"/consume", ""); r.Status != 200 {
		t.Fatalf("consume: %d %s", r.Status, r.Raw)
	}
	at := func() time.Time { return now.Add(3 * time.Hour) }
	var ra sweep.PurgeResult
	var errA error
	p.Meanwhile(func() {
		ra, errA = (&sweep.Purger{Store: a.Sweeper.Store, Segments: 1, Now: at}).Run(context.Background())
	})
	p.PassThenConflict(0, 1) // B's delete meets A's: ReplicatedWriteConflictException
	rb, err := (&sweep.Purger{Store: b.Sweeper.Store, Segments: 1, Now: at}).Run(context.Background())
	if err != nil || errA != nil {
		t.Fatal(err, errA)
	}
	if p.Counts().Conflicts != 1 {
		t.Fatalf("no conflict injected: %s", p)
	}
	if ra.Deleted < 1 {
		t.Fatalf("Region A's purge %+v deleted nothing", ra)
	}
	if rb.Deleted != 0 || rb.Kept != 1 {
		t.Errorf("Region B's purge %+v: its delete conflicted (nothing applied) and its re-send found the item gone, want deleted 0, kept 1", rb)
	}
}

// behindFaults is a local server whose DynamoDB requests of operation go
// through the fault proxy (nothing dropped until the test says so).
func behindFaults(t *testing.T, operation string, opts func(*server.Options)) (*faults.Proxy, *testkit.Env) {
	t.Helper()
	p, err := faults.Start(testkit.DynamoDB(t), faults.Rates{}, 1, operation)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, testkit.NewEnv(t, func(o *server.Options) {
		opts(o)
		o.AWS.BaseEndpoint = aws.String(p.URL)
	})
}
