// Package sweep marks due actions expired, so action.expired is published
// within a minute or so of expiresAt instead of whenever DynamoDB TTL gets
// round to deleting the item (typically days).
//
// The expiry index keeps an entry for every action until TTL deletes it
// (consume and cancel leave it, so they write no index). A sweep reads, per
// shard, only the entries that fell due since that shard's watermark (a
// number in the table), reads their items in batches (eventually consistent,
// half a read unit each) to skip the finished ones without a write, and
// expires each open one with one conditional write (store.Expire): a
// consume racing it wins or loses cleanly. Then it raises the watermarks,
// which never go down, so overlapping sweeps only find each other's work
// done. The watermark stays Settle behind the sweep's clock: an index entry
// that shows up late (a create's write landing late, the index eventually
// consistent) is still found.
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
	// DefaultSettle is how far the watermark stays behind a sweep's clock:
	// a create's write lands within its API function's life (10 s), from an
	// instance whose clock may be store.MaxClockSkew off, and the index shows
	// it a moment later, so an entry due before the watermark can still
	// appear for that long. Entries due within it are read again by the next
	// sweep (with a sweep a minute, 1 in 4 is read twice).
	DefaultSettle = 15 * time.Second
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
	// Settle keeps the watermarks behind the sweep's clock (default DefaultSettle).
	Settle time.Duration
	Now    func() time.Time
	Log    *slog.Logger
	// Metrics receives ActionsExpired, SweepDuration and ExpiryLag per run.
	Metrics *telemetry.Metrics
}

// Result says what one Run did.
type Result struct {
	Due      int  `json:"due"`      // entries the index listed since the watermarks
	Expired  int  `json:"expired"`  // actions this run marked expired
	Finished int  `json:"finished"` // listed but already finished (skipped after the read, raced, or swept by another run)
	Written  int  `json:"written"`  // Expire writes tried (Expired + the races they lost)
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
	settle := s.Settle
	if settle <= 0 {
		settle = DefaultSettle
	}
	ctx, cancel := context.WithDeadline(ctx, s.deadline(ctx, start))
	defer cancel()

	workers := s.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	sem := make(chan struct{}, workers) // Expire writes in flight, over all shards
	var due, expired, finished, written, maxLagMs atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}

	marks, err := s.Store.Watermarks(ctx)
	if err != nil {
		return Result{DurationMs: time.Since(start).Milliseconds()}, errors.Join(errors.New("sweep: dynamodb failed; the next run retries"), err)
	}
	var raisedMu sync.Mutex
	raised := map[int]int64{}
	limit := cutoff.Add(-settle).UnixMilli() // no watermark goes past this

	// expire marks one page's open actions and reports whether all of them
	// were handled.
	expire := func(page []store.DueAction) bool {
		done, err := s.Store.Finished(ctx, page)
		if err != nil {
			if ctx.Err() == nil {
				fail(err)
			}
			return false
		}
		var wg sync.WaitGroup
		var pageFailed atomic.Bool
		for _, d := range page {
			due.Add(1)
			if done[d.ID] {
				finished.Add(1)
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				wg.Wait()
				return false
			}
			wg.Go(func() {
				defer func() { <-sem }()
				// The write's own "now" is checked against expiresAtMs again,
				// so an action is never expired before its time.
				at := now()
				written.Add(1)
				ok, err := s.Store.Expire(ctx, d.ID, at)
				switch {
				case err != nil:
					pageFailed.Store(true)
					if ctx.Err() == nil {
						fail(err)
					}
				case ok:
					expired.Add(1)
					lag := at.Sub(d.ExpiresAt).Milliseconds()
					for old := maxLagMs.Load(); lag > old && !maxLagMs.CompareAndSwap(old, lag); old = maxLagMs.Load() {
					}
				default:
					finished.Add(1)
				}
			})
		}
		wg.Wait()
		return !pageFailed.Load() && ctx.Err() == nil
	}

	var readers sync.WaitGroup
	for shard := range s.Store.ExpiryShards() {
		readers.Go(func() {
			// handled: every entry up to it is done. A page ends at its
			// last entry's ms less one, as more entries may share that ms.
			handled, listed, whole := marks[shard], false, true
			err := s.Store.Due(ctx, shard, marks[shard], cutoff, func(page []store.DueAction) bool {
				listed = true
				if !expire(page) {
					whole = false
					return false
				}
				handled = page[len(page)-1].ExpiresAt.UnixMilli() - 1
				return true
			})
			if err != nil {
				whole = false
				if ctx.Err() == nil {
					fail(err)
				}
			}
			if whole {
				handled = cutoff.UnixMilli()
			}
			// An idle shard keeps its watermark: no write when nothing was due.
			if mark := min(handled, limit); listed && mark > marks[shard] {
				raisedMu.Lock()
				raised[shard] = mark
				raisedMu.Unlock()
			}
		})
	}
	readers.Wait()
	if len(raised) > 0 {
		// Progress is kept even when the budget ran out (a fresh context:
		// this write is what makes the next run cheaper).
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := s.Store.AdvanceWatermarks(wctx, raised); err != nil {
			fail(err)
		}
		wcancel()
	}

	r := Result{
		Due: int(due.Load()), Expired: int(expired.Load()), Finished: int(finished.Load()), Written: int(written.Load()),
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
	// Idle sweeps stay quiet, and so does one its caller stopped on purpose
	// (the local server shutting down); a budget or deadline that ran out is said.
	if s.Log != nil && (r.Due > 0 || !r.Complete && !errors.Is(ctx.Err(), context.Canceled)) {
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
