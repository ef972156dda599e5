package idempotency_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/dynamostore"
)

// TestSharedCacheNeverAnswersForAnotherStore: the Cache's doc says to share
// one per process, and a key's record lives in its store. One function
// wrapped for two stores (two tenants' tables, or one table under two
// prefixes), both with the default namespace (the function's name) and one
// shared Cache: a key completed in the first store is not a completed key of
// the second, so a call there runs the function; it must not replay the
// first store's response from the cache.
func TestSharedCacheNeverAnswersForAnotherStore(t *testing.T) {
	eu, _ := newTable(t)
	other := eu.Name + "-us"
	if err := dynamostore.CreateTable(context.Background(), localDynamoDB(), other, ""); err != nil {
		t.Fatal(err)
	}
	stores := map[string]idempotency.Persistence{
		"two tables":          dynamostore.New(eu.DB, other),
		"one table, prefixes": &dynamostore.Table{DB: eu.DB, Name: eu.Name, Prefix: "us#"},
	}
	for name, us := range stores {
		t.Run(name, func(t *testing.T) {
			cache := idempotency.NewCache(16, time.Minute) // one per process
			var runs atomic.Int32
			var charge = func(ctx context.Context, o order) (receipt, error) {
				runs.Add(1)
				return receipt{Charge: "ch_" + o.ID, Amount: o.Amount}, nil
			}
			euCharge := idempotency.Wrap(charge, idempotency.Options[order, receipt]{Store: eu, Key: orderID, Payload: amountOnly, Cache: cache})
			usCharge := idempotency.Wrap(charge, idempotency.Options[order, receipt]{Store: us, Key: orderID, Payload: amountOnly, Cache: cache})
			id := fmt.Sprintf("o-%d", time.Now().UnixNano()) // new on a reused DynamoDB Local too
			if _, err := euCharge(context.Background(), order{ID: id, Amount: 500}); err != nil {
				t.Fatal(err)
			}
			ctx, o := idempotency.WithOutcome(context.Background())
			r, err := usCharge(ctx, order{ID: id, Amount: 500})
			if err != nil || runs.Load() != 2 || o.Replayed {
				t.Fatalf("first call of the key on the other store: %+v %v, outcome %+v, runs %d; want the function run (2 runs), not a replay of the first store's record", r, err, *o, runs.Load())
			}
		})
	}
}
