package server_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/eventbus"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/local/streams"
	"github.com/exactonce/exactonce/shared/publish"
)

// region is one "Region" of a multi-Region ExactOnce run locally: its own
// API, stream publisher and bus, on the table every Region shares (an MRSC
// table is, to its callers, one strongly consistent table). Killing it
// drops every answer from then on, even of a request whose write it already
// made, and stops its publisher.
type region struct {
	name string
	env  *testkit.Env
	url  string
	dead atomic.Bool
}

func newRegion(t *testing.T, name string) *region {
	r := &region{name: name}
	r.env = testkit.NewEnv(t, func(o *server.Options) {
		testkit.WithEvents(o)
		o.TuneEvents = func(p *publish.Publisher, rd *streams.Reader) {
			p.Attempts, p.Backoff = 3, 50*time.Millisecond
			rd.Backoff, rd.MaxBackoff, rd.Poll = 50*time.Millisecond, 400*time.Millisecond, 20*time.Millisecond
		}
	})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !r.dead.Load() {
			rec := httptest.NewRecorder()
			r.env.Handler.ServeHTTP(rec, req)
			if !r.dead.Load() {
				for k, v := range rec.Header() {
					w.Header()[k] = v
				}
				w.WriteHeader(rec.Code)
				_, _ = w.Write(rec.Body.Bytes())
				return
			}
		}
		panic(http.ErrAbortHandler) // the Region is gone: the connection closes unanswered
	}))
	t.Cleanup(hs.Close)
	r.url = hs.URL
	return r
}

func (r *region) kill() {
	r.dead.Store(true)
	r.env.Server.Close() // its stream reader and publisher stop
}

// TestTwoRegions (issue 25): two Regions on one table race consumes of the
// same actions, one caller per Region and action, and Region A is killed in
// the middle. A caller whose Region is gone (no answer, even after the
// write) fails over to the other Region with the same Idempotency-Key, as
// DNS failover or a client with both endpoints does. No action is consumed
// twice, every final answer matches the item (one 200, the other 409
// already_used with the same consumedAt), and Region B's bus carries the
// event of every action, those consumed through A included: B's publisher
// reads the same records (on AWS: its replica's stream, with the same
// records), with the same deterministic event ids.
func TestTwoRegions(t *testing.T) {
	t.Parallel()
	const n = 60
	a, b := newRegion(t, "A"), newRegion(t, "B")
	var failovers, replays, unavailable atomic.Int64
	// call sends to the caller's Region, fails over to the other when its
	// Region does not answer, and retries a 503 where it is.
	call := func(first *region, path, body, key string) (*testkit.Response, error) {
		at := first
		for range 50 {
			r, err := testkit.Send(nil, "POST", at.url+path, body, "Idempotency-Key", key)
			switch {
			case err != nil && at == a:
				failovers.Add(1)
				at = b
			case err != nil:
				return nil, err
			case r.Status == 503:
				unavailable.Add(1)
			default:
				if r.Header.Get("Idempotent-Replayed") == "true" {
					replays.Add(1)
				}
				return r, nil
			}
		}
		return nil, errors.New("no answer after 50 tries")
	}
	var done atomic.Int64
	var killOnce sync.Once
	killedAt := -1
	var mu sync.Mutex
	answers := map[string][2]*testkit.Response{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		id := fmt.Sprintf("mr-%02d", i)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			home := [2]*region{a, b}[i%2]
			if r, err := call(home, "/actions", `{"actionId":"`+id+`","userId":"u"}`, "create-"+id); err != nil || r.Status != 201 {
				t.Errorf("create %s: %v %v", id, r, err)
				return
			}
			var race sync.WaitGroup
			for c, reg := range []*region{a, b} {
				race.Go(func() {
					r, err := call(reg, "/actions/"+id+"/consume", `{"reason":"via `+reg.name+`"}`, fmt.Sprintf("%s-%s", id, reg.name))
					if err != nil {
						t.Errorf("consume %s via %s: %v", id, reg.name, err)
						return
					}
					mu.Lock()
					ans := answers[id]
					ans[c] = r
					answers[id] = ans
					mu.Unlock()
				})
			}
			race.Wait()
			if done.Add(1) == n/2 {
				killOnce.Do(func() { // mid-run: other races are in flight
					killedAt = n / 2
					a.kill()
				})
			}
		})
	}
	wg.Wait()
	if killedAt < 0 {
		t.Fatal("Region A was never killed")
	}
	evA := localEvents(t, a.env) // what A published before it died (the bus is read in memory)

	items := map[string]map[string]any{}
	for i := range n {
		id := fmt.Sprintf("mr-%02d", i)
		item := testkit.Do(t, nil, "GET", b.url+"/actions/"+id, "")
		items[id] = item.Body
		wins := 0
		for c, r := range answers[id] {
			if r == nil {
				t.Fatalf("%s: caller %d has no answer", id, c)
			}
			if r.Status == 200 {
				wins++
			}
			if (r.Status != 200 && (r.Status != 409 || r.Str("error") != "already_used")) || r.Str("consumedAt") != item.Str("consumedAt") {
				t.Fatalf("%s: answer %d %s does not match the item %s", id, r.Status, r.Raw, item.Raw)
			}
		}
		if wins != 1 || item.Str("state") != "consumed" {
			t.Fatalf("%s: %d callers won, item %s", id, wins, item.Raw)
		}
	}
	// Every finished action's event on the surviving Region's bus.
	consumed := func(evs []eventbus.Event) map[string]string {
		out := map[string]string{}
		for _, e := range evs {
			var d struct{ EventID, ActionID, ConsumedAt string }
			if err := json.Unmarshal(e.Detail, &d); err != nil {
				t.Fatal(err)
			}
			if e.DetailType == "action.consumed" {
				out[d.ActionID] = d.EventID + " " + d.ConsumedAt
			}
		}
		return out
	}
	var evB []eventbus.Event
	for deadline := time.Now().Add(testkit.Patience); ; time.Sleep(50 * time.Millisecond) {
		evB = localEvents(t, b.env)
		if len(consumed(evB)) >= n || time.Now().After(deadline) {
			break
		}
	}
	onB, onA := consumed(evB), consumed(evA)
	for id, item := range items {
		if _, ok := onB[id]; !ok {
			t.Errorf("no action.consumed for %s on Region B's bus", id)
		}
		if want, _ := item["consumedAt"].(string); len(onB[id]) < len(want) || onB[id][len(onB[id])-len(want):] != want {
			t.Errorf("%s: event %q does not carry the item's consumedAt %s", id, onB[id], want)
		}
		if ev, ok := onA[id]; ok && ev != onB[id] {
			t.Errorf("%s: the Regions published different events: A %q, B %q", id, ev, onB[id])
		}
	}
	t.Logf("%d actions raced by one caller per Region (%d consumes); Region A killed after %d: %d failovers to B, %d keyed replays (answers lost with A), %d 503s retried; "+
		"events: %d on A's bus before it died (%d distinct), %d on B's (%d distinct, every action's); each action consumed once, every answer matching its item",
		n, 2*n, killedAt, failovers.Load(), replays.Load(), unavailable.Load(), len(evA), distinct(evA), len(evB), distinct(evB))
}
