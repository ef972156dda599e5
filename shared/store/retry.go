package store

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// unprocessedBackoff spaces the attempts of a batch call whose keys
// DynamoDB left unprocessed: the SDK's exponential backoff with jitter.
var unprocessedBackoff = retry.NewExponentialJitterBackoff(time.Second)

// maxUnprocessedAttempts bounds those attempts; then the call is
// ErrUnavailable (DynamoDB keeps throttling).
const maxUnprocessedAttempts = 8

// retryUnprocessed calls f until it reports done, backing off between
// attempts, for at most maxUnprocessedAttempts.
func retryUnprocessed(ctx context.Context, f func(context.Context) (done bool, err error)) error {
	for attempt := 0; ; attempt++ {
		done, err := f(ctx)
		if err != nil || done {
			return err
		}
		if attempt+1 == maxUnprocessedAttempts {
			return ErrUnavailable
		}
		d, err := unprocessedBackoff.BackoffDelay(attempt+1, nil)
		if err != nil {
			return err
		}
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}
