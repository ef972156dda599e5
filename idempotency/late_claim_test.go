package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/exactonce/exactonce/idempotency"
)

// holdFirstAnswer stands between the SDK and DynamoDB Local: the first
// UpdateItem (a claim) is applied at once, its answer is held until release
// is closed (a slow or stalled connection, or the SDK's retries of a lost
// answer, as the caller sees them).
type holdFirstAnswer struct {
	next    aws.HTTPClient
	once    sync.Once
	held    chan struct{} // closed once the first write was applied
	release chan struct{}
}

func (h *holdFirstAnswer) Do(r *http.Request) (*http.Response, error) {
	first := false
	if r.Header.Get("X-Amz-Target") == "DynamoDB_20120810.UpdateItem" {
		h.once.Do(func() { first = true })
	}
	resp, err := h.next.Do(r)
	if first {
		close(h.held)
		<-h.release
	}
	return resp, err
}

// TestClaimAnsweredLateDoesNotRunTheEffect: a claim whose answer comes back
// after more than half its lease does not run the function. With the lease
// lapsed meanwhile, another invocation took the key over and ran the effect:
// running it on the late answer too was a second effect (the old code did,
// and its complete then failed with ErrLeaseLost). Without a takeover the
// late claim gives the key back, so a retry runs the effect at once. Either
// way the late invocation gets an ErrInProgress to retry on.
func TestClaimAnsweredLateDoesNotRunTheEffect(t *testing.T) {
	const lease = 10 * time.Second
	for _, tc := range []struct {
		name     string
		late     time.Duration // how long the first claim's answer takes
		takeover bool          // another invocation claims the key meanwhile
	}{
		{"taken over after the lease lapsed", lease + time.Second, true},
		{"past half the lease, not taken over", lease/2 + time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hold := &holdFirstAnswer{held: make(chan struct{}), release: make(chan struct{})}
			table, counter := newTable(t, func(next aws.HTTPClient) aws.HTTPClient { hold.next = next; return hold })
			clk := newClock()
			var effects atomic.Int32
			h := idempotency.Wrap(func(ctx context.Context, o order) (receipt, error) {
				return receipt{Charge: fmt.Sprint("ch_", effects.Add(1)), Amount: o.Amount}, nil
			}, idempotency.Options[order, receipt]{Store: table, Key: orderID, Lease: lease, Now: clk.Now})
			ctx, o := context.Background(), order{ID: "o-late", Amount: 3}

			var lateErr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, lateErr = h(ctx, o)
			}()
			<-hold.held // the claim is applied; its answer is on its way
			clk.Advance(tc.late)
			if tc.takeover {
				if r, err := h(ctx, o); err != nil || r != (receipt{"ch_1", 3}) {
					t.Fatalf("takeover: %+v %v", r, err)
				}
			}
			counter.Take()
			close(hold.release)
			<-done
			if n := effects.Load(); n != map[bool]int32{true: 1, false: 0}[tc.takeover] {
				t.Fatalf("effects after the late claim: %d", n)
			}
			var busy *idempotency.InProgressError
			if !errors.As(lateErr, &busy) || !busy.Late || busy.RetryAfter != 0 {
				t.Fatalf("the late claim: %v, want an ErrInProgress (late) to retry at once", lateErr)
			}
			if n, only := updates(counter.Take()); n != 1 || !only {
				t.Errorf("the late claim gave the key back in %d more writes, want 1 (its release)", n)
			}
			if r, err := h(ctx, o); err != nil || r != (receipt{"ch_1", 3}) || effects.Load() != 1 {
				t.Fatalf("the retry: %+v %v, %d effects; want ch_1 and one effect in all", r, err, effects.Load())
			}
		})
	}
}
