package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/telemetry"
)

// DefaultPurgeSegments is how many parallel Scan segments a purge reads.
const DefaultPurgeSegments = 8

// Purger deletes what DynamoDB TTL would have on a table that has none (a
// multi-Region strongly consistent table): every item past its retention
// (keys, supersede pointers, finished actions; see store.ScanPurgeable), with
// one conditional DeleteItem each. It is safe to run in every Region at
// once: a second delete of an item finds it gone and changes nothing, and
// an item whose retention moved on in the meantime is kept. What a run does
// not reach within its budget, the next run finds.
type Purger struct {
	Store *store.Store
	// Segments of the parallel Scan (default DefaultPurgeSegments).
	Segments int
	// Workers is how many deletes run at once (default DefaultWorkers).
	Workers int
	// Budget bounds one Run as Sweeper.Budget does.
	Budget time.Duration
	Now    func() time.Time
	Log    *slog.Logger
	// Metrics receives ItemsPurged and PurgeDuration per run.
	Metrics *telemetry.Metrics
}

// PurgeResult says what one purge Run did.
type PurgeResult struct {
	Scanned int `json:"scanned"` // items the Scan read (and was billed for)
	Matched int `json:"matched"` // purgeable when read
	Deleted int `json:"deleted"` // deleted by this run
	Kept    int `json:"kept"`    // matched but kept at the delete (gone already, retention moved on)
	// ReadUnits and WriteUnits are the capacity DynamoDB reported: the Scan,
	// and the deletes with their index entries.
	ReadUnits  float64 `json:"readUnits"`
	WriteUnits float64 `json:"writeUnits"`
	Complete   bool    `json:"complete"` // every segment was read to the end within the budget
	DurationMs int64   `json:"durationMs"`
}

// Run purges the table once.
func (p *Purger) Run(ctx context.Context) (PurgeResult, error) {
	start, at := time.Now(), time.Now()
	if p.Now != nil {
		at = p.Now()
	}
	ctx, cancel := context.WithDeadline(ctx, (&Sweeper{Budget: p.Budget}).deadline(ctx, start))
	defer cancel()
	segments, workers := p.Segments, p.Workers
	if segments <= 0 {
		segments = DefaultPurgeSegments
	}
	if workers <= 0 {
		workers = DefaultWorkers
	}
	sem := make(chan struct{}, workers)
	var scanned, matched, deleted, kept atomic.Int64
	var mu sync.Mutex
	var readUnits, writeUnits float64
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil && ctx.Err() == nil {
			firstErr = err
		}
	}
	var segs sync.WaitGroup
	for seg := range segments {
		segs.Go(func() {
			stats, err := p.Store.ScanPurgeable(ctx, seg, segments, at, func(keys []string) error {
				var wg sync.WaitGroup
				for _, k := range keys {
					select {
					case sem <- struct{}{}:
					case <-ctx.Done():
						wg.Wait()
						return ctx.Err()
					}
					wg.Go(func() {
						defer func() { <-sem }()
						ok, units, err := p.Store.Purge(ctx, k, at)
						switch {
						case err != nil:
							fail(err)
						case ok:
							deleted.Add(1)
							mu.Lock()
							writeUnits += units
							mu.Unlock()
						default:
							kept.Add(1)
						}
					})
				}
				wg.Wait()
				return nil
			})
			scanned.Add(int64(stats.Scanned))
			matched.Add(int64(stats.Matched))
			mu.Lock()
			readUnits += stats.ReadUnits
			mu.Unlock()
			if err != nil {
				fail(err)
			}
		})
	}
	segs.Wait()
	r := PurgeResult{Scanned: int(scanned.Load()), Matched: int(matched.Load()), Deleted: int(deleted.Load()), Kept: int(kept.Load()),
		ReadUnits: readUnits, WriteUnits: writeUnits, Complete: ctx.Err() == nil && firstErr == nil, DurationMs: time.Since(start).Milliseconds()}
	p.Metrics.Emit([]telemetry.Dim{{Name: "Function", Value: "sweeper"}},
		telemetry.Value{Name: "ItemsPurged", Unit: telemetry.Count, Value: float64(r.Deleted)},
		telemetry.Value{Name: "PurgeDuration", Unit: telemetry.Milliseconds, Value: float64(r.DurationMs)})
	if p.Log != nil {
		p.Log.Info("purge", "scanned", r.Scanned, "deleted", r.Deleted, "kept", r.Kept, "readUnits", r.ReadUnits,
			"writeUnits", r.WriteUnits, "complete", r.Complete, "durationMs", r.DurationMs)
	}
	if firstErr != nil {
		return r, errors.Join(errors.New("purge: dynamodb failed; the next run retries"), firstErr)
	}
	return r, nil
}

// Event is what the sweeper's schedules send: {} (or nothing) for a sweep,
// {"purge": true} for a purge.
type Event struct {
	Purge bool `json:"purge"`
}

// Handler is the sweeper Lambda's handler: a sweep on every event, a purge
// on Event.Purge (only scheduled where the table has no TTL).
func Handler(s *Sweeper, p *Purger) func(context.Context, json.RawMessage) (any, error) {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var ev Event
		_ = json.Unmarshal(raw, &ev) // a scheduled event is an object without "purge": a sweep
		if ev.Purge {
			return p.Run(ctx)
		}
		return s.Run(ctx)
	}
}
