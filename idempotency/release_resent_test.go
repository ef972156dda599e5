package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/exactonce/exactonce/idempotency"
)

// loseNextAnswer stands between the SDK and DynamoDB Local: once armed, the
// next UpdateItem is applied and its answer lost (the SDK re-sends it), and
// meanwhile runs before the re-send can go out: what other callers do in
// that window.
type loseNextAnswer struct {
	next      aws.HTTPClient
	armed     atomic.Bool
	meanwhile func()
}

func (l *loseNextAnswer) Do(r *http.Request) (*http.Response, error) {
	lose := r.Header.Get("X-Amz-Target") == "DynamoDB_20120810.UpdateItem" && l.armed.CompareAndSwap(true, false)
	resp, err := l.next.Do(r)
	if err != nil || !lose {
		return resp, err
	}
	resp.Body.Close()
	l.meanwhile()
	return nil, errors.New("read tcp: connection reset by peer (injected: DynamoDB applied the write, its answer is lost)")
}

// TestReleaseResentAfterItsAnswerWasLost: a release whose answer was lost
// applied, and the SDK's re-send of it answers as a replay of that release,
// even when another caller claimed the key (or claimed and completed it)
// before the re-send arrived: the released key was claimable at once. The
// old code answered lease_lost (or key_completed), as if the release had
// never applied: the claim removed the released token the refusal is
// explained by. The other caller's lease is untouched.
func TestReleaseResentAfterItsAnswerWasLost(t *testing.T) {
	for _, tc := range []struct {
		name     string
		complete bool // the other caller also completes before the re-send
	}{
		{"claimed by another meanwhile", false},
		{"claimed and completed by another meanwhile", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lose := &loseNextAnswer{}
			table, counter := newTable(t, func(next aws.HTTPClient) aws.HTTPClient { lose.next = next; return lose })
			ctx, now, name := context.Background(), time.Now(), "k"
			claim := func() *idempotency.Record {
				rec, err := table.Claim(ctx, name, idempotency.Claim{Now: now, Fingerprint: "f", Lease: time.Minute, Token: idempotency.NewToken()})
				if err != nil {
					t.Fatalf("claim: %v", err)
				}
				return rec
			}
			first := claim()
			var other *idempotency.Record
			lose.meanwhile = func() {
				other = claim()
				if tc.complete {
					if _, err := table.Complete(ctx, name, other.Token, []byte(`"done"`), now); err != nil {
						t.Errorf("the other caller's complete: %v", err)
					}
				}
			}
			lose.armed.Store(true)
			counter.Take()
			_, err := table.Release(ctx, name, first.Token, "declined", now)
			var replay *idempotency.Replay
			if !errors.As(err, &replay) {
				t.Fatalf("the re-sent release: %v, want a replay (it applied)", err)
			}
			if replay.Key.Failures != 1 || replay.Key.LastError != "declined" || replay.Key.Attempts != 2 {
				t.Fatalf("the replay's key %+v, want the release counted once and the other claim", replay.Key)
			}
			if n := counter.Take()["UpdateItem"]; n != 4-map[bool]int{true: 0, false: 1}[tc.complete] {
				t.Errorf("%d writes, want the release, its re-send and the other caller's", n)
			}
			if tc.complete {
				return
			}
			// The other caller still holds the key, and completes it.
			if rec, err := table.Complete(ctx, name, other.Token, []byte(`"done"`), now); err != nil || rec.Failures != 1 {
				t.Fatalf("the other caller's complete: %+v %v", rec, err)
			}
		})
	}
}

// TestLateClaimWhoseReleaseWasResentWaitsForTheTakeover: a claim answered
// too late gives the key back (late_claim_test.go); when that release's
// answer is lost and another invocation claims the key before the re-send,
// the re-send replays the release, and the late invocation is told to wait
// for the other's lease (bounded by its own), as when its release finds the
// key taken over, rather than to retry at once into an in_progress.
func TestLateClaimWhoseReleaseWasResentWaitsForTheTakeover(t *testing.T) {
	const lease = 10 * time.Second
	hold := &holdFirstAnswer{held: make(chan struct{}), release: make(chan struct{})}
	lose := &loseNextAnswer{}
	table, _ := newTable(t,
		func(next aws.HTTPClient) aws.HTTPClient { lose.next = next; return lose },
		func(next aws.HTTPClient) aws.HTTPClient { hold.next = next; return hold })
	clk := newClock()
	var effects atomic.Int32
	h := idempotency.Wrap(func(ctx context.Context, o order) (receipt, error) {
		effects.Add(1)
		return receipt{Charge: "ch_1", Amount: o.Amount}, nil
	}, idempotency.Options[order, receipt]{Store: table, Namespace: "late", Key: orderID, Lease: lease, Now: clk.Now})
	ctx, o := context.Background(), order{ID: "o-late-resent", Amount: 3}
	name := idempotency.KeyName("late", o.ID)

	var lateErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, lateErr = h(ctx, o)
	}()
	<-hold.held
	clk.Advance(lease/2 + time.Second) // late, the lease not lapsed: nobody can take the key yet
	lose.meanwhile = func() {
		// The late claim's release applied; another invocation claims the
		// released key (any fingerprint, as Run's claims may) before the
		// re-send.
		if _, err := table.Claim(ctx, name, idempotency.Claim{Now: clk.Now(), Fingerprint: "other", Lease: time.Minute,
			Token: idempotency.NewToken(), AnyAfterRelease: true}); err != nil {
			t.Errorf("the other invocation's claim: %v", err)
		}
	}
	lose.armed.Store(true)
	close(hold.release)
	<-done
	var busy *idempotency.InProgressError
	if !errors.As(lateErr, &busy) || !busy.Late || busy.RetryAfter != lease {
		t.Fatalf("the late claim: %v (%+v), want an ErrInProgress (late) to retry after %v: the other's lease, bounded by its own", lateErr, busy, lease)
	}
	if effects.Load() != 0 {
		t.Fatalf("%d effects, want none: the late claim never runs fn, and the other invocation has not", effects.Load())
	}
}
