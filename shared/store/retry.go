package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/exactonce/exactonce/internal/backoff"
)

// maxUnprocessedAttempts bounds the attempts of a batch call whose keys
// DynamoDB left unprocessed; then the call is ErrUnavailable (DynamoDB
// keeps throttling).
const maxUnprocessedAttempts = 8

// errUnprocessed is ErrUnavailable from keys DynamoDB still left
// unprocessed after maxUnprocessedAttempts (what was read is kept).
var errUnprocessed = fmt.Errorf("%w: keys left unprocessed", ErrUnavailable)

// retryUnprocessed calls f until it reports done, with the SDK's
// exponential backoff and jitter (up to a second) between attempts.
func retryUnprocessed(ctx context.Context, f func(context.Context) (done bool, err error)) error {
	err := backoff.Retry(ctx, maxUnprocessedAttempts, time.Second, f)
	if errors.Is(err, backoff.ErrExhausted) {
		return errUnprocessed
	}
	return err
}
