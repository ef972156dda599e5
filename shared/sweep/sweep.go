// Package sweep marks due actions expired, so action.expired is published
// within a minute or so of expiresAt instead of whenever DynamoDB TTL gets
// round to deleting the item (typically days). It queries every shard of the
// sparse expiry index for expiresAtMs <= now and expires each hit with one
// conditional write (store.Expire); a consume racing it wins or loses
// cleanly, and overlapping sweeps only find each other's work done.
package sweep

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/telemetry"
)

// Defaults.
const (
	DefaultWorkers = 32
	// DefaultBudget applies without a context deadline.
	DefaultBudget = 50 * time.Second
	// deadlineMargin is left before a context deadline (a Lambda's timeout)
	// so the sweep returns its result instead of being killed.
	deadlineMargin = 10 * time.Second
)

// Sweeper expires due actions in one table.
type Sweeper struct {
	Store *store.Store
	// Workers is how many Expire writes run at once (default DefaultWorkers).
	Workers int
	// Budget bounds one Run; zero means the context deadline minus a margin,
	// or DefaultBudget. What is left is found by the next run.
	Budget time.Duration
	Now    func() time.Time
	Log    *slog.Logger
	// Metrics receives ActionsExpired, SweepDuration and ExpiryLag per run.
	Metrics *telemetry.Metrics
}

// Result says what one Run did.
type Result struct {
	Due      int  `json:"due"`      // ids the index listed
	Expired  int  `json:"expired"`  // actions this run marked expired
	Finished int  `json:"finished"` // listed but already finished (raced, or swept by another run)
	Complete bool `json:"complete"` // every shard was read to the end within the budget
	// DurationMs is the wall time of the run.
	DurationMs int64 `json:"durationMs"`
	// MaxLagMs is the longest time from expiresAt to being marked, over the
	// actions this run expired.
	MaxLagMs int64 `json:"maxLagMs"`
}

// Run sweeps every shard once.
func (s *Sweeper) Run(ctx context.Context) (Result, error) {
	start := time.Now()
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	cutoff := now()
	ctx, cancel := context.WithDeadline(ctx, s.deadline(ctx, start))
	defer cancel()

	workers := s.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	ids := make(chan store.DueAction, workers*4)
	var due, expired, finished, maxLagMs atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}

	var readers sync.WaitGroup
	for shard := range s.Store.ExpiryShards() {
		readers.Go(func() {
			err := s.Store.Due(ctx, shard, cutoff, func(page []store.DueAction) bool {
				for _, d := range page {
					select {
					case ids <- d:
						due.Add(1)
					case <-ctx.Done():
						return false
					}
				}
				return true
			})
			if err != nil && ctx.Err() == nil {
				fail(err)
			}
		})
	}
	go func() { readers.Wait(); close(ids) }()

	var writers sync.WaitGroup
	for range workers {
		writers.Go(func() {
			for d := range ids {
				if ctx.Err() != nil {
					continue // drain: the budget is spent
				}
				// The write's own "now" is checked against expiresAtMs again,
				// so an action is never expired before its time.
				at := now()
				ok, err := s.Store.Expire(ctx, d.ID, at)
				switch {
				case err != nil && ctx.Err() == nil:
					fail(err)
				case ok:
					expired.Add(1)
					lag := at.Sub(d.ExpiresAt).Milliseconds()
					for old := maxLagMs.Load(); lag > old && !maxLagMs.CompareAndSwap(old, lag); old = maxLagMs.Load() {
					}
				case err == nil:
					finished.Add(1)
				}
			}
		})
	}
	writers.Wait()

	r := Result{
		Due: int(due.Load()), Expired: int(expired.Load()), Finished: int(finished.Load()),
		Complete: ctx.Err() == nil && firstErr == nil, DurationMs: time.Since(start).Milliseconds(),
		MaxLagMs: maxLagMs.Load(),
	}
	values := []telemetry.Value{
		{Name: "ActionsExpired", Unit: telemetry.Count, Value: float64(r.Expired)},
		{Name: "SweepDuration", Unit: telemetry.Milliseconds, Value: float64(r.DurationMs)},
	}
	if r.Expired > 0 {
		values = append(values, telemetry.Value{Name: "ExpiryLag", Unit: telemetry.Milliseconds, Value: float64(r.MaxLagMs)})
	}
	s.Metrics.Emit([]telemetry.Dim{{Name: "Function", Value: "sweeper"}}, values...)
	if s.Log != nil && (r.Due > 0 || !r.Complete) { // idle sweeps stay quiet
		s.Log.Info("sweep", "due", r.Due, "expired", r.Expired, "finished", r.Finished, "complete", r.Complete, "durationMs", r.DurationMs)
	}
	if firstErr != nil {
		return r, errors.Join(errors.New("sweep: dynamodb failed; the next run retries"), firstErr)
	}
	return r, nil
}

func (s *Sweeper) deadline(ctx context.Context, start time.Time) time.Time {
	if s.Budget > 0 {
		return start.Add(s.Budget)
	}
	if d, ok := ctx.Deadline(); ok {
		return d.Add(-deadlineMargin)
	}
	return start.Add(DefaultBudget)
}
