// Package backoff is the one helper of the service's own retry loops, the
// ones the SDK's retryer does not cover (keys a batch call left
// unprocessed, PutEvents entries that failed, DynamoDB Local's lock
// waits): Retry spaces attempts with the SDK's exponential backoff and
// full jitter, Sleep waits for a caller's own delay.
package backoff

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// ErrExhausted is Retry's answer when f was still not done after every
// attempt.
var ErrExhausted = errors.New("backoff: attempts exhausted")

// Retry calls f until it reports done or fails, at most attempts times,
// waiting between calls as the SDK's retry.ExponentialJitterBackoff does
// (up to maxDelay). It returns f's error, ctx's, or ErrExhausted.
func Retry(ctx context.Context, attempts int, maxDelay time.Duration, f func(context.Context) (done bool, err error)) error {
	b := retry.NewExponentialJitterBackoff(maxDelay)
	for attempt := 1; ; attempt++ {
		done, err := f(ctx)
		if err != nil || done {
			return err
		}
		if attempt == attempts {
			return ErrExhausted
		}
		d, err := b.BackoffDelay(attempt, nil)
		if err != nil {
			return err
		}
		if err := Sleep(ctx, d); err != nil {
			return err
		}
	}
}

// Sleep waits d, or until ctx is done (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
