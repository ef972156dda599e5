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
	"github.com/exactonce/exactonce/shared/sweep"
)

// TestPurgeAnswerLostIsCountedAsDeleted: the purge's DeleteItem of a
// finished action applies and its answer is lost; the SDK sends it again
// and the re-send finds the item gone. The run deleted it: its result (and
// ItemsPurged) says deleted, not kept.
func TestPurgeAnswerLostIsCountedAsDeleted(t *testing.T) {
	t.Parallel()
	p, err := faults.Start(testkit.DynamoDB(t), faults.Rates{}, 1, "DeleteItem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	env := testkit.NewEnv(t, func(o *server.Options) {
		o.Retention = time.Hour
		o.AWS.BaseEndpoint = aws.String(p.URL)
	})
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
