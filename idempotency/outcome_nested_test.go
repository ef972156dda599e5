package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/idempotency"
)

// TestOutcomeOfAWrappedCallIsNotAnInnerCalls: a wrapped handler that calls
// another wrapped function with its own ctx (an idempotent charge inside an
// idempotent handler). The handler failed after the charge completed, so the
// retry runs the handler for the first time while the charge replays. The
// caller's Outcome is the handler's own (WithOutcome: "whether the call made
// with it was a replay"; each call's own), so it must not read Replayed, and
// the handler, running for the first time, must not see IsReplay(ctx).
func TestOutcomeOfAWrappedCallIsNotAnInnerCalls(t *testing.T) {
	table, _ := newTable(t)
	var charges, handled atomic.Int32
	var sawReplay atomic.Bool
	charge := idempotency.Wrap(func(ctx context.Context, o order) (receipt, error) {
		charges.Add(1)
		return receipt{Charge: "ch_" + o.ID, Amount: o.Amount}, nil
	}, idempotency.Options[order, receipt]{Store: table, Namespace: "charge", Key: orderID})
	id := fmt.Sprintf("n-%d", time.Now().UnixNano()) // new on a reused DynamoDB Local too
	failOnce := true
	handler := idempotency.Wrap(func(ctx context.Context, o order) (receipt, error) {
		r, err := charge(ctx, o)
		if err != nil {
			return receipt{}, err
		}
		if idempotency.IsReplay(ctx) {
			sawReplay.Store(true)
		}
		if failOnce {
			failOnce = false
			return receipt{}, errors.New("the email after the charge failed")
		}
		handled.Add(1)
		return r, nil
	}, idempotency.Options[order, receipt]{Store: table, Namespace: "handler", Key: orderID})

	if _, err := handler(context.Background(), order{ID: id, Amount: 5}); err == nil {
		t.Fatal("the first attempt did not fail")
	}
	sawReplay.Store(false)
	ctx, o := idempotency.WithOutcome(context.Background())
	r, err := handler(ctx, order{ID: id, Amount: 5}) // the retry: the handler's first completed run
	if err != nil || r.Charge != "ch_"+id || charges.Load() != 1 || handled.Load() != 1 {
		t.Fatalf("retry: %+v %v, charges %d handled %d", r, err, charges.Load(), handled.Load())
	}
	if o.Replayed || o.FromCache || o.Key != "handler:"+id || sawReplay.Load() {
		t.Errorf("the handler ran for the first time: outcome %+v, IsReplay inside it %v; want Replayed false, Key handler:<id>", *o, sawReplay.Load())
	}
}
