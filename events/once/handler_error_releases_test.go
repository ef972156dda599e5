package once_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/events/once"
	"github.com/exactonce/exactonce/idempotency"
)

// TestHandlerErrorAlwaysReleases: "the handler fails (error or panic): the
// claim is released so the redelivery runs it again" (package once), and Do
// returns "fn's own error when it failed (the claim is released)". That
// holds for every error, including one a handler passes up from its own use
// of the idempotency library: a nested key another call holds after its
// response could not be stored (*idempotency.InProgressError, which also
// matches idempotency.ErrResponseNotStored), or a nested response too
// large. Such an error must not keep the event's claim held for the
// guard's retention (7 days, past EventBridge's 24 h of retries), where
// every redelivery gets ErrInProgress and the event is never handled.
func TestHandlerErrorAlwaysReleases(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"nested key held after its response was not stored", fmt.Errorf("reserve stock: %w", &idempotency.InProgressError{RetryAfter: time.Hour, NotStored: true})},
		{"nested response too large", fmt.Errorf("render invoice: %w", idempotency.ErrResponseTooLarge)},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, _, db := newGuard(t)
			ctx := context.Background()
			ran, err := g.Do(ctx, "ev", func(context.Context) error { return c.err })
			if !ran || err != c.err {
				t.Errorf("failing handler: ran=%v err=%v, want its own error %v", ran, err, c.err)
			}
			if item := claim(t, db, g, "ev"); item["token"] != nil || str(item, "releasedAt") == "" || str(item, "failures") != "1" {
				t.Errorf("claim not released after the handler failed: token=%q releasedAt=%q failures=%q lastError=%q",
					str(item, "token"), str(item, "releasedAt"), str(item, "failures"), str(item, "lastError"))
			}
			runs := 0
			ran, err = g.Do(ctx, "ev", func(context.Context) error { runs++; return nil })
			if !ran || err != nil || runs != 1 {
				t.Fatalf("redelivery after the failure: ran=%v err=%v runs=%d (in progress: %v), want the handler run once",
					ran, err, runs, errors.Is(err, once.ErrInProgress))
			}
		})
		// DynamoDB down when the claim is released: Do returns fn's error
		// joined with the release's, and the claim frees itself when its
		// lease lapses.
		t.Run(c.name+" and the release failing", func(t *testing.T) {
			g, _, db := newGuard(t)
			var clock atomic.Int64
			clock.Store(time.Now().UnixMilli())
			g.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
			g.Lease = time.Minute
			down := &outage{Client: db}
			g.DB = down
			ctx := context.Background()
			ran, err := g.Do(ctx, "ev", func(context.Context) error { down.on.Store(true); return c.err })
			if !ran || !errors.Is(err, c.err) || !errors.Is(err, errDown) {
				t.Errorf("failing handler, failing release: ran=%v err=%v, want its own error joined with the release's", ran, err)
			}
			down.on.Store(false)
			if _, err := g.Do(ctx, "ev", func(context.Context) error { t.Error("ran during the lease"); return nil }); !errors.Is(err, once.ErrInProgress) {
				t.Errorf("redelivery during the lease: %v, want ErrInProgress", err)
			}
			clock.Add((61 * time.Second).Milliseconds())
			runs := 0
			if ran, err := g.Do(ctx, "ev", func(context.Context) error { runs++; return nil }); !ran || err != nil || runs != 1 {
				t.Fatalf("redelivery after the lease: ran=%v err=%v runs=%d, want the handler run once", ran, err, runs)
			}
		})
	}
}

var errDown = errors.New("dynamodb unreachable")

// outage fails every UpdateItem while on, as a DynamoDB outage would.
type outage struct {
	*dynamodb.Client
	on atomic.Bool
}

func (o *outage) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if o.on.Load() {
		return nil, errDown
	}
	return o.Client.UpdateItem(ctx, in, opts...)
}
