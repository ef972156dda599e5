package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/store"
)

// TestUnprocessedKeysAreAskedAgain: keys a BatchGetItem leaves unprocessed
// (DynamoDB's answer to a batch it throttled) are asked for again with the
// store's backoff. A read that gets them within its attempts answers in
// full; past them, a strongly consistent read (a multi-use action's held
// count) is ErrUnavailable, never a count that misses a gate, and the
// sweeper's read of finished actions leaves them out (Expire's condition
// then decides) instead of failing the sweep.
func TestUnprocessedKeysAreAskedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	endpoint := testkit.DynamoDB(t)
	p, err := faults.Start(endpoint, faults.Rates{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := store.CreateTable(ctx, dynamodb.NewFromConfig(awsconfig.Local(endpoint)), "unprocessed", false); err != nil {
		t.Fatal(err)
	}
	st := store.New(dynamodb.NewFromConfig(awsconfig.Local(p.URL)), "unprocessed", store.Options{})
	now := time.Now()
	create := func(id string, maxUses int) *action.Action {
		a := &action.Action{ID: id, UserID: "u", ActiveAt: action.Millis(now), ExpiresAt: action.Millis(now.Add(time.Hour)),
			CreatedAt: action.Millis(now), MaxUses: maxUses}
		if _, err := st.Create(ctx, a, nil); err != nil {
			t.Fatal(err)
		}
		return a
	}
	var due []store.DueAction
	for _, id := range []string{"a", "b", "c"} {
		a := create(id, 0)
		if _, err := st.Cancel(ctx, id, store.Cancel{Now: now}); err != nil {
			t.Fatal(err)
		}
		due = append(due, store.DueAction{ID: id, ExpiresAt: a.ExpiresAt})
	}
	coupon := create("coupon", 100)
	if _, err := st.Take(ctx, coupon.ID, store.Take{UseID: "device-1", Now: now}); err != nil {
		t.Fatal(err)
	}

	p.LeaveUnprocessed(2)
	done, err := st.Finished(ctx, due)
	if err != nil || len(done) != 3 {
		t.Fatalf("keys left unprocessed twice: Finished = %v, %v; want all 3 read on the third attempt", done, err)
	}
	got, err := st.Get(ctx, "", coupon.ID)
	if err != nil || got.UsesHeld != 1 {
		t.Fatalf("Get after the faults: %+v, %v", got, err)
	}

	p.LeaveUnprocessed(1000)
	before := p.Counts().Unprocessed
	done, err = st.Finished(ctx, due)
	if err != nil || len(done) != 0 {
		t.Fatalf("keys never processed: Finished = %v, %v; want none shown finished, no error", done, err)
	}
	if asked := p.Counts().Unprocessed - before; asked != 8 {
		t.Errorf("keys never processed were asked for %d times, want 8 (the store's attempts)", asked)
	}
	if got, err := st.Get(ctx, "", coupon.ID); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a held count whose gates stay unprocessed: %+v, %v; want ErrUnavailable", got, err)
	}
	p.LeaveUnprocessed(0)
	t.Logf("%d BatchGetItems answered with every key unprocessed", p.Counts().Unprocessed)
}
