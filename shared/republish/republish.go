// Package republish rebuilds, from the table, the events of every action
// consumed, canceled or marked expired in a time window, and publishes them
// again with the same event ids (shared/publish builds them), so subscribers
// that de-duplicate on eventId see each one once. It is the way out of an
// on-failure message, an outage longer than the stream's 24 h, or any event
// a subscriber lost. Running it twice is harmless.
//
// Cost: a Scan reads every item of the table, whatever the window (the
// filter is applied after the read): eventually consistent, 0.5 read unit
// per 4 KB read, so a million ~1 KB actions is ~125,000 read request units,
// about $0.016 on demand (us-east-1, $0.125 per million), plus one
// EventBridge event ($1.00 per million) per action in the window.
package republish

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/publish"
	"github.com/exactonce/exactonce/shared/store"
)

// DefaultSegments of the parallel Scan.
const DefaultSegments = 8

// Request is the Lambda's input (and the command's flags).
type Request struct {
	// From and To bound the window (RFC 3339): transitions at or after From
	// and before To. To defaults to now.
	From string `json:"from"`
	To   string `json:"to,omitempty"`
	// Segments of the parallel Scan (default DefaultSegments, at most 1000);
	// Only, when set, scans just these segments (e.g. one Lambda invocation
	// per segment for a table too large for one invocation's 15 minutes).
	Segments int   `json:"segments,omitempty"`
	Only     []int `json:"only,omitempty"`
}

// Result says what was done.
type Result struct {
	From      string  `json:"from"`
	To        string  `json:"to"`
	Segments  int     `json:"segments"`
	Scanned   int     `json:"scanned"`   // items read
	Matched   int     `json:"matched"`   // events the window holds: actions finished, uses taken and released in it
	Published int     `json:"published"` // events EventBridge accepted
	ReadUnits float64 `json:"readUnits"` // consumed by the Scan
	// Undecodable are the keys of items in the window that do not decode
	// (actions, and the gates, use records and actions of uses): no event
	// can be rebuilt for them (fix the item, run again).
	Undecodable []string `json:"undecodable,omitempty"`
	Millis      int64    `json:"durationMs"`
}

// RequestError is a Request that cannot be run; Field names its field.
type RequestError struct{ Field, Message string }

func (e *RequestError) Error() string { return "republish: " + e.Field + " " + e.Message }

// Validate checks req as Handle does before it reads anything: a
// *RequestError names the field at fault.
func (req Request) Validate() error {
	_, _, _, _, err := req.window(time.Now())
	return err
}

// window is the request's time window (to defaulting to now), its segment
// count and the segments to scan.
func (req Request) window(now time.Time) (from, to time.Time, total int, segments []int, err error) {
	if req.From == "" {
		return from, to, 0, nil, &RequestError{Field: "from", Message: "is required (an RFC 3339 time)"}
	}
	if from, err = time.Parse(time.RFC3339Nano, req.From); err != nil {
		return from, to, 0, nil, &RequestError{Field: "from", Message: "must be an RFC 3339 time such as 2026-11-22T00:00:00Z"}
	}
	to = now
	if req.To != "" {
		if to, err = time.Parse(time.RFC3339Nano, req.To); err != nil {
			return from, to, 0, nil, &RequestError{Field: "to", Message: "must be an RFC 3339 time such as 2026-11-23T00:00:00Z"}
		}
	}
	if !from.Before(to) {
		return from, to, 0, nil, &RequestError{Field: "from", Message: "must be before to (" + to.UTC().Format(time.RFC3339) + ")"}
	}
	total = req.Segments
	if total < 0 || total > 1000 {
		return from, to, 0, nil, &RequestError{Field: "segments", Message: "must be 1 to 1000"}
	}
	if total == 0 {
		total = DefaultSegments
	}
	segments = req.Only
	if len(segments) == 0 {
		for i := range total {
			segments = append(segments, i)
		}
	}
	for i, s := range segments {
		if s < 0 || s >= total {
			return from, to, 0, nil, &RequestError{Field: "only", Message: fmt.Sprintf("segment %d is not in 0..%d", s, total-1)}
		}
		if slices.Contains(segments[:i], s) {
			// A segment scanned twice would publish its events twice and
			// count them twice in the result.
			return from, to, 0, nil, &RequestError{Field: "only", Message: fmt.Sprintf("segment %d is listed twice", s)}
		}
	}
	return from, to, total, segments, nil
}

// useEntries rebuilds the events of the uses in a page: a held use taken
// in the window (its action.used), a released one taken or released in it
// (its action.used, its action.use_released: a take record stamped by a
// release whose use has left its gate), with one read of the actions and
// take records they need, and one of the released uses' gates. It also
// returns the keys of the items that read does not decode.
func (r *Republisher) useEntries(ctx context.Context, w store.Window, from, to, now time.Time) ([]*publish.Entry, []string, error) {
	if len(w.Held) == 0 && len(w.Released) == 0 {
		return nil, nil, nil
	}
	var items []string
	var recs []store.RecordKey
	for _, h := range w.Held {
		items = append(items, h.ItemKey)
		recs = append(recs, store.RecordKey{ItemKey: h.ItemKey, Ref: h.Entry.Ref})
	}
	for _, rr := range w.Released {
		items = append(items, rr.ItemKey)
	}
	st := store.New(r.DB, r.Table, store.Options{})
	uc, err := st.ReadUseContext(ctx, slices.Compact(slices.Sorted(slices.Values(items))), recs)
	if err != nil {
		return nil, nil, err
	}
	released, badGates, err := st.Released(ctx, uc.Actions, w.Released, now)
	if err != nil {
		return nil, nil, err
	}
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	var out []*publish.Entry
	for _, h := range w.Held {
		a, rec, err := uc.Use(store.RecordKey{ItemKey: h.ItemKey, Ref: h.Entry.Ref}, h.CreatedAt)
		if err != nil {
			continue // gone since (its action's retention ended), or in Unreadable
		}
		es, _, err := publish.RebuildUses(a, []publish.UseChange{{Take: h.Entry.Ref, UsedAt: h.Entry.At}}, nil, map[string]*action.UseRecord{h.Entry.Ref: rec})
		if err != nil {
			return nil, nil, err
		}
		out = append(out, es...)
	}
	for _, rr := range released {
		a := uc.Action(rr.ItemKey, rr.Record.ActionCreatedAt)
		if a == nil {
			continue // gone, another action's record, or in Unreadable
		}
		es, at, err := publish.RebuildUses(a, nil, []*action.UseRecord{rr.Record}, nil)
		if err != nil {
			return nil, nil, err
		}
		for k, e := range es {
			if in(at[k]) {
				out = append(out, e)
			}
		}
	}
	return out, append(slices.Sorted(maps.Keys(uc.Unreadable)), badGates...), nil
}

// Republisher reads one table and publishes through one publisher.
type Republisher struct {
	DB        *dynamodb.Client
	Table     string
	Publisher *publish.Publisher
	Log       *slog.Logger
	Now       func() time.Time // nil: time.Now
}

// Handle runs one republish (the Lambda handler). An error says what failed;
// what was published before it stays published, and a rerun is safe.
func (r *Republisher) Handle(ctx context.Context, req Request) (Result, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	start := now()
	from, to, total, segments, err := req.window(start)
	if err != nil {
		return Result{}, err
	}
	res := Result{From: store.FormatTime(from), To: store.FormatTime(to), Segments: total}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(segments))
	for i, seg := range segments {
		wg.Go(func() {
			st, err := store.ScanWindow(ctx, r.DB, r.Table, from, to, seg, total, func(w store.Window) error {
				entries := make([]*publish.Entry, 0, len(w.Actions))
				for _, a := range w.Actions {
					e, _, err := publish.Rebuild(a)
					if err != nil {
						return err
					}
					if e != nil {
						entries = append(entries, e)
					}
				}
				uses, unreadable, err := r.useEntries(ctx, w, from, to, start)
				if err != nil {
					return err
				}
				n, err := r.Publisher.Publish(ctx, append(entries, uses...))
				mu.Lock()
				res.Undecodable = append(res.Undecodable, unreadable...)
				res.Matched += len(entries) + len(uses)
				res.Published += n
				mu.Unlock()
				return err
			})
			mu.Lock()
			res.Scanned += st.Scanned
			res.ReadUnits += st.ReadUnits
			res.Undecodable = append(res.Undecodable, st.Undecodable...)
			mu.Unlock()
			errs[i] = err
		})
	}
	wg.Wait()
	res.Millis = now().Sub(start).Milliseconds()
	for _, err := range errs {
		if err != nil {
			r.Log.Error("republish failed", "error", err.Error(), "published", res.Published)
			return res, err
		}
	}
	res.Undecodable = slices.Compact(slices.Sorted(slices.Values(res.Undecodable)))
	if len(res.Undecodable) > 0 {
		r.Log.Error("items in the window could not be read; no event rebuilt for them", "actionIds", res.Undecodable)
	}
	r.Log.Info("republished", "from", res.From, "to", res.To, "scanned", res.Scanned, "matched", res.Matched,
		"published", res.Published, "readUnits", res.ReadUnits, "durationMs", res.Millis)
	return res, nil
}
