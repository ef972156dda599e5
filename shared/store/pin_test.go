package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
)

// TestPINWrites: the store's PIN writes, each one conditional UpdateItem
// on DynamoDB Local. ReserveGuess counts a request's guess once (its retry
// finds the reservation and counts nothing); a consume without a
// reservation refuses a PIN action and writes nothing; a consume of the
// reserved request consumes and gives the guess back; SpendGuess counts a
// comparison once per key and body, then answers locked when no guess is
// left, and no guess is reserved then. The order of these writes (reserve, compare, consume or spend) is
// shared/service's Consume.
func TestPINWrites(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	st := env.Sweeper.Store
	ctx := context.Background()
	now := action.Millis(time.Now())
	create := func(id string) {
		t.Helper()
		a := &action.Action{ID: id, UserID: "u", CreatedAt: now, ActiveAt: now, ExpiresAt: now.Add(time.Hour),
			PINHash: []byte("not a real hash"), MaxPINAttempts: 2}
		if _, err := st.Create(ctx, a, nil); err != nil {
			t.Fatal(err)
		}
	}
	get := func(id string) *action.Action {
		t.Helper()
		a, err := st.Get(ctx, "", id)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	requests := func(step string, want int) {
		t.Helper()
		total := 0
		for _, n := range env.Counter.Take() {
			total += n
		}
		if total != want {
			t.Errorf("%s: %d DynamoDB requests, want %d", step, total, want)
		}
	}
	code := func(err error) action.Code {
		var r *action.Rejection
		if errors.As(err, &r) {
			return r.Code
		}
		return ""
	}

	create("p1")
	w := action.Write{Key: "k1", Fingerprint: "f1", RequestID: "q1"}
	c := store.Consume{Write: w, Fingerprints: []string{"f1"}, Now: now, PINPresented: true}
	env.Counter.Take()

	reserved, old, err := st.ReserveGuess(ctx, "p1", c)
	requests("reserve", 1)
	if err != nil || old != nil || reserved.PINFailures != 1 || reserved.PINTries[action.TryToken(w)].N != 1 {
		t.Fatalf("reserve: %+v %+v %v, want one guess counted under the request", reserved, old, err)
	}
	reserved, old, err = st.ReserveGuess(ctx, "p1", c)
	requests("reserve again", 1)
	if err != nil || reserved != nil || old == nil || old.PINFailures != 1 || old.PINTries[action.TryToken(w)].N != 1 {
		t.Fatalf("reserve again: %+v %+v %v, want the first reservation, nothing counted", reserved, old, err)
	}

	if _, err := st.Consume(ctx, "p1", store.Consume{Write: action.Write{RequestID: "q2"}, Now: now}); code(err) != action.CodePINRequired {
		t.Fatalf("consume without a reservation: %v, want pin_required", err)
	}
	requests("consume without a reservation", 1)
	other := c
	other.Write, other.Reserved = action.Write{Key: "k2", Fingerprint: "f2", RequestID: "q3"}, true
	if _, err := st.Consume(ctx, "p1", other); err == nil {
		t.Fatal("a consume of a request that reserved nothing consumed")
	}
	requests("consume of another request", 1)
	if a := get("p1"); !a.ConsumedAt.IsZero() || a.PINFailures != 1 {
		t.Fatalf("after two refused consumes: consumedAt %v, %d guesses counted, want none consumed and 1", a.ConsumedAt, a.PINFailures)
	}
	env.Counter.Take()

	c.Reserved = true
	consumed, err := st.Consume(ctx, "p1", c)
	requests("consume of the reserved request", 1)
	if err != nil || consumed.ConsumedAt.IsZero() || consumed.PINFailures != 0 {
		t.Fatalf("consume of the reserved request: %+v %v, want consumed with the guess given back", consumed, err)
	}

	create("p2")
	env.Counter.Take()
	reused := action.Write{Key: "k3", Fingerprint: "f3"}
	for i := range 2 {
		err := st.SpendGuess(ctx, "", "p2", reused, now)
		requests("spend", 1)
		var r *action.Rejection
		if !errors.As(err, &r) || r.Code != action.CodeKeyReused || r.Action.PINFailures != 1 {
			t.Fatalf("spend %d: %v, want key_reused with 1 guess counted", i+1, err)
		}
	}
	if err := st.SpendGuess(ctx, "", "p2", action.Write{Key: "k4", Fingerprint: "f4"}, now); code(err) != action.CodeKeyReused {
		t.Fatalf("a second body's spend: %v, want key_reused", err)
	}
	if err := st.SpendGuess(ctx, "", "p2", action.Write{Key: "k5", Fingerprint: "f5"}, now); code(err) != action.CodeLocked {
		t.Fatalf("a spend with no guess left: %v, want locked", err)
	}
	if a := get("p2"); a.PINFailures != 2 || !a.Locked() {
		t.Fatalf("after the spends: %d guesses counted, locked %v, want 2 and locked", a.PINFailures, a.Locked())
	}
	env.Counter.Take()
	late := store.Consume{Write: action.Write{Key: "k6", Fingerprint: "f6"}, Now: now, PINPresented: true}
	if reserved, old, err := st.ReserveGuess(ctx, "p2", late); err != nil || reserved != nil || old == nil || old.PINFailures != 2 {
		t.Fatalf("a reservation with no guess left: %+v %+v %v, want refused, nothing counted", reserved, old, err)
	}
	requests("reserve with no guess left", 1)
}
