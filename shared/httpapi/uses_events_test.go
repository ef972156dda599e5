package httpapi_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/eventbus"
)

// useEvents waits until the bus holds want action.used and
// action.use_released events of action id (or no more come for 10 s), and
// returns them.
func useEvents(t *testing.T, env *testkit.Env, id string, want int) []eventbus.Event {
	t.Helper()
	deadline, seen, quiet := time.Now().Add(testkit.Patience), -1, time.Now()
	for {
		var out []eventbus.Event
		for _, e := range env.Bus.Events() {
			var d struct{ ActionID string }
			if (e.DetailType == "action.used" || e.DetailType == "action.use_released") && json.Unmarshal(e.Detail, &d) == nil && d.ActionID == id {
				out = append(out, e)
			}
		}
		if len(out) != seen {
			seen, quiet = len(out), time.Now()
		}
		if len(out) >= want || time.Now().After(deadline) || time.Since(quiet) > 10*time.Second {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestUseTransitionsHaveTheirOwnEvents: 16 workers race to take and release
// one useId of a 1-seat licence, 12 rounds. Every take answered 200 has one
// action.used and every release one action.use_released, each with its own
// eventId: a de-duplicating subscriber drops none. And the transitions,
// ordered by their times, alternate take, release, take..., each later
// than the one before: a re-take is never stamped before the release that
// freed its seat. (Stamped with the request's start, a re-take that
// started in the same millisecond as the first take but committed after
// the release repeated its eventId, in 8 of 12 rounds.)
func TestUseTransitionsHaveTheirOwnEvents(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.WithEvents)
	const rounds, workers = 12, 16
	bad := 0
	for round := range rounds {
		id := fmt.Sprintf("ev%d", round)
		create(t, env, `{"actionId":"`+id+`","userId":"u","maxUses":1,"releasable":true}`)
		var takes, rels atomic.Int32
		type mark struct {
			at   string
			take bool
		}
		var mu sync.Mutex
		var marks []mark
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range workers {
			wg.Go(func() {
				<-start
				r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", `{"useId":"dev"}`)
				if err != nil || r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "" {
					return
				}
				// A 200 that is not a replay may still be the held use's
				// answer: count each usedAt once.
				rel, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/uses/dev/release", ``)
				mu.Lock()
				defer mu.Unlock()
				if !slices.ContainsFunc(marks, func(m mark) bool { return m.take && m.at == r.Str("usedAt") }) {
					marks = append(marks, mark{r.Str("usedAt"), true})
					takes.Add(1)
				}
				if err == nil && rel.Status == 200 && !slices.ContainsFunc(marks, func(m mark) bool { return !m.take && m.at == rel.Str("releasedAt") }) {
					marks = append(marks, mark{rel.Str("releasedAt"), false})
					rels.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		evs := useEvents(t, env, id, int(takes.Load()+rels.Load()))
		ids := map[string]bool{}
		for _, e := range evs {
			var d struct{ EventID string }
			_ = json.Unmarshal(e.Detail, &d)
			ids[d.EventID] = true
		}
		slices.SortFunc(marks, func(x, y mark) int {
			if x.at == y.at {
				return 0
			}
			if x.at < y.at {
				return -1
			}
			return 1
		})
		ordered := true
		for k, m := range marks {
			if m.take != (k%2 == 0) || k > 0 && m.at == marks[k-1].at {
				ordered = false
			}
		}
		if len(ids) != int(takes.Load()+rels.Load()) || len(evs) != len(ids) || !ordered {
			bad++
			t.Logf("round %d: %d takes and %d releases answered, %d events, %d distinct ids; transitions in time order %v", round, takes.Load(), rels.Load(), len(evs), len(ids), marks)
		}
	}
	t.Logf("%d of %d rounds lost an event to a repeated id or stamped a transition out of order", bad, rounds)
	if bad > 0 {
		t.Fail()
	}
}

// TestTakesNeverAfterTheCancel: takes race a cancel, 20 rounds of 32 takers
// on an action of 50 uses: every take answered 200 was stamped before the
// action's canceledAt, and every take answered after the cancel's 200 was
// refused. (A take stamped with its request's start could commit before a
// cancel that started earlier and read as taken after it.)
func TestTakesNeverAfterTheCancel(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.On(testkit.OwnDynamoDB(t)))
	late := 0
	for round := range testkit.Scale(20) {
		id := fmt.Sprintf("tc%d", round)
		create(t, env, `{"actionId":"`+id+`","userId":"u","maxUses":50}`)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var used []string
		var canceledAt string
		start := make(chan struct{})
		for i := range 32 {
			wg.Go(func() {
				<-start
				r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", fmt.Sprintf(`{"useId":"u%d"}`, i))
				if err == nil && r.Status == 200 {
					mu.Lock()
					used = append(used, r.Str("usedAt"))
					mu.Unlock()
				}
			})
		}
		wg.Go(func() {
			<-start
			r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/cancel", `{}`)
			if err != nil || r.Status != 200 {
				t.Errorf("cancel: %v %v", err, r)
				return
			}
			mu.Lock()
			canceledAt = r.Str("canceledAt")
			mu.Unlock()
		})
		close(start)
		wg.Wait()
		if r := do(t, env, "POST", "/actions/"+id+"/consume", `{"useId":"after"}`); r.Status != 410 {
			t.Fatalf("round %d: a take after the cancel: %d %s", round, r.Status, r.Raw)
		}
		for _, u := range used {
			if u >= canceledAt {
				late++
				t.Logf("round %d: a take stamped %s, the cancel %s", round, u, canceledAt)
			}
		}
	}
	if late > 0 {
		t.Fatalf("%d takes stamped at or after their action's canceledAt", late)
	}
}

// TestTakesNeverAfterExpiry: 32 takers keep taking uses of an action that
// expires under them, 5 rounds: every take answered 200 was stamped before
// expiresAt, and every take after it is 410 expired (a gate refuses by the
// action's expiresAt, with no write from the sweeper). The action expires
// an hour ahead; once every taker has had an answer, the server's clock
// moves to 200 ms before it, so takes in flight cross it however slow the
// machine (a 3 s window on the real clock saw no take at all when the
// first, cold, takes answered after it: helper-39).
func TestTakesNeverAfterExpiry(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	var offset time.Duration // the server's clock, ahead of the real one
	for round := range 5 {
		id := fmt.Sprintf("te%d", round)
		exp := time.Now().Add(offset + time.Hour)
		expires := exp.UTC().Format("2006-01-02T15:04:05.000Z07:00")
		create(t, env, `{"actionId":"`+id+`","userId":"u","maxUses":100000,"expiresAt":"`+expires+`"}`)
		var wg, answered sync.WaitGroup
		var mu sync.Mutex
		var used []string
		var expired atomic.Int32
		answered.Add(32)
		for w := range 32 {
			wg.Go(func() {
				first := sync.OnceFunc(answered.Done)
				defer first()
				for i := 0; ; i++ {
					r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", fmt.Sprintf(`{"useId":"w%d-%d"}`, w, i))
					first()
					switch {
					case err == nil && r.Status == 200:
						mu.Lock()
						used = append(used, r.Str("usedAt"))
						mu.Unlock()
					case err == nil && r.Status == 410 && r.Str("error") == "expired":
						expired.Add(1)
						return
					default:
						t.Errorf("round %d: %v %v", round, err, r)
						return
					}
				}
			})
		}
		answered.Wait()
		offset = time.Until(exp) - 200*time.Millisecond
		env.Shift(offset)
		wg.Wait()
		for _, u := range used {
			if u >= expires {
				t.Fatalf("round %d: a take stamped %s, the action expired at %s", round, u, expires)
			}
		}
		if len(used) == 0 || expired.Load() != 32 {
			t.Fatalf("round %d: %d takes, %d refused expired", round, len(used), expired.Load())
		}
		t.Logf("round %d: %d takes before %s, then 32 × 410 expired", round, len(used), expires)
	}
}
