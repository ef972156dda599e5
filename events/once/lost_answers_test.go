package once_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/events/once"
)

// lossy applies every request, then loses the answer of a share of the
// UpdateItem ones (the write landed; the caller sees a connection reset,
// which the SDK retries): the claim's, the "done" write's, the release's.
type lossy struct {
	next          aws.HTTPClient
	share         float64
	lost, applied atomic.Int64
}

func (l *lossy) Do(r *http.Request) (*http.Response, error) {
	resp, err := l.next.Do(r)
	if err != nil || !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem") {
		return resp, err
	}
	l.applied.Add(1)
	if rand.Float64() >= l.share {
		return resp, nil
	}
	l.lost.Add(1)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
}

// TestLostAnswersUnderConcurrentRedeliveries: EventBridge delivers each
// event several times at once and again until acknowledged, while a
// quarter of DynamoDB's answers to the guard's writes are lost after the
// write landed (the SDK retries them; 12 attempts, so a claim whose every
// answer is lost, held until its lease lapses, is a one in a million). Each event's handler must take effect
// exactly once ("runs your handler at most once per eventId"; an error
// releases it, "the redelivery runs again"), every delivery must end
// acknowledged, and no holder may lose its lease (nothing ran long).
func TestLostAnswersUnderConcurrentRedeliveries(t *testing.T) {
	g, _, _ := newGuard(t)
	net := &lossy{next: httpClient(), share: 0.25}
	cfg := localConfig(net)
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 12
			o.RateLimiter = ratelimit.None
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
	}
	g.DB = dynamodb.NewFromConfig(cfg)
	// The lease covers the claim's and the done write's answers, retries
	// included (the library's rule): single UpdateItems took up to 28 s on a
	// loaded machine, and a 20 s lease lapsed under a holder (helper-39).
	g.Lease = 2 * time.Minute

	const events, deliveries = 30, 8
	var effects, attempts [events]atomic.Int32
	var inProgress, otherErrs, leaseLost atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	failures := make(chan error, events*deliveries)
	for e := range events {
		id := fmt.Sprintf("ev-%d", e)
		fn := func(context.Context) error {
			if attempts[e].Add(1) == 1 && e%3 == 0 {
				return errors.New("first attempt fails")
			}
			effects[e].Add(1)
			return nil
		}
		for range deliveries {
			wg.Go(func() {
				<-start
				for try := 0; ; try++ {
					_, err := g.Do(context.Background(), id, fn)
					switch {
					case err == nil:
						return
					case errors.Is(err, once.ErrLeaseLost):
						leaseLost.Add(1)
					case errors.Is(err, once.ErrInProgress):
						inProgress.Add(1)
					case err.Error() != "first attempt fails":
						otherErrs.Add(1)
					}
					if try > 2000 {
						failures <- fmt.Errorf("%s: never acknowledged (last error %v)", id, err)
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	for e := range events {
		want := int32(1)
		if e%3 == 0 {
			want = 2
		}
		if effects[e].Load() != 1 || attempts[e].Load() != want {
			t.Errorf("ev-%d: effect %d times in %d handler runs, want 1 in %d", e, effects[e].Load(), attempts[e].Load(), want)
		}
	}
	if leaseLost.Load() != 0 {
		t.Errorf("%d deliveries lost their lease", leaseLost.Load())
	}
	t.Logf("%d events x %d deliveries: %d UpdateItem answers of %d lost; %d ErrInProgress, %d other errors (SDK retries exhausted)",
		events, deliveries, net.lost.Load(), net.applied.Load(), inProgress.Load(), otherErrs.Load())
}
