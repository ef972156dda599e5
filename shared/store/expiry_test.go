package store_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
)

// TestFinishWritesNoIndex: create writes the table and the expiry index
// once each; consume (with and without a PIN), cancel and expire write the
// table once and the index not at all, as DynamoDB reports it
// (ReturnConsumedCapacity=INDEXES), and the finished actions stay listed.
func TestFinishWritesNoIndex(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	st := env.Sweeper.Store
	expiresAt := action.Millis(time.Now().Add(time.Hour))
	exp := expiresAt.UTC().Format(time.RFC3339Nano)
	step := func(what, method, path, body string, want testkit.Units) {
		t.Helper()
		if r := testkit.Do(t, nil, method, env.URL+path, body); r.Status >= 300 {
			t.Fatalf("%s: %d %s", what, r.Status, r.Raw)
		}
		if got := env.Capacity.Take()["UpdateItem"]; got != want {
			t.Errorf("%s: write units %+v, want %+v", what, got, want)
		}
	}
	// A create writes its two index entries (expiry, user); nothing later
	// writes either index.
	for _, id := range []string{"c", "x", "e"} {
		step("create "+id, "POST", "/actions", fmt.Sprintf(`{"actionId":%q,"userId":"u","expiresAt":%q}`, id, exp), testkit.Units{Table: 1, Index: 2})
	}
	step("create with a PIN", "POST", "/actions", fmt.Sprintf(`{"actionId":"p","userId":"u","pin":"2468","expiresAt":%q}`, exp), testkit.Units{Table: 1, Index: 2})
	step("consume", "POST", "/actions/c/consume", "", testkit.Units{Table: 1})
	step("cancel", "POST", "/actions/x/cancel", "", testkit.Units{Table: 1})
	step("consume with the right PIN (reserve, then consume)", "POST", "/actions/p/consume", `{"pin":"2468"}`, testkit.Units{Table: 2})
	ok, err := st.Expire(context.Background(), "e", expiresAt)
	if err != nil || !ok {
		t.Fatalf("expire: %v %v", ok, err)
	}
	if got := env.Capacity.Take()["UpdateItem"]; got != (testkit.Units{Table: 1}) {
		t.Errorf("expire: write units %+v, want 1 on the table", got)
	}

	listed := map[string]bool{}
	for shard := range st.ExpiryShards() {
		err := st.Due(context.Background(), shard, 0, expiresAt, func(page []store.DueAction) bool {
			for _, d := range page {
				listed[d.ID] = d.ExpiresAt.Equal(expiresAt)
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if want := map[string]bool{"c": true, "x": true, "e": true, "p": true}; !maps.Equal(listed, want) {
		t.Errorf("index lists %v, want %v", listed, want)
	}
}

// TestFinished: of the listed entries, exactly those whose item is
// consumed, canceled or expired, with the entry's expiresAt, are skipped;
// open, missing and re-created ones (another expiresAt) are left to Expire.
// More than one BatchGetItem's worth of keys is read in chunks.
func TestFinished(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	ctx := context.Background()
	st := env.Sweeper.Store
	now := action.Millis(time.Now())
	expiresAt := now.Add(time.Hour)
	mk := func(id string, exp time.Time) {
		if _, err := st.Create(ctx, &action.Action{ID: id, UserID: "u", CreatedAt: now, ActiveAt: now, ExpiresAt: exp}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var due []store.DueAction
	want := map[string]bool{}
	for i := range 150 {
		id := fmt.Sprintf("f%03d", i)
		mk(id, expiresAt)
		due = append(due, store.DueAction{ID: id, ExpiresAt: expiresAt})
		switch i % 5 {
		case 0:
			_, err := st.Consume(ctx, id, store.Consume{Now: now})
			want[id] = err == nil
		case 1:
			_, err := st.Cancel(ctx, id, store.Cancel{Now: now})
			want[id] = err == nil
		case 2:
			ok, err := st.Expire(ctx, id, expiresAt)
			want[id] = ok && err == nil
		}
	}
	mk("other", expiresAt.Add(time.Hour)) // same id, another life: its entry is not this one
	if _, err := st.Consume(ctx, "other", store.Consume{Now: now}); err != nil {
		t.Fatal(err)
	}
	due = append(due, store.DueAction{ID: "other", ExpiresAt: expiresAt}, store.DueAction{ID: "missing", ExpiresAt: expiresAt})
	env.Counter.Take()
	got, err := st.Finished(ctx, due)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 90 || !maps.Equal(got, want) {
		t.Errorf("finished %d %v, want the 90 consumed, canceled or expired", len(got), got)
	}
	if ops := env.Counter.Take(); ops["BatchGetItem"] != 2 || len(ops) != 1 {
		t.Errorf("requests %v, want 2 BatchGetItem", ops)
	}
}

// TestWatermarks: none on a new table; raised per shard, never lowered;
// a raise that another sweep overtook on one shard still raises the others.
func TestWatermarks(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	ctx := context.Background()
	st := env.Sweeper.Store
	read := func() map[int]int64 {
		t.Helper()
		m, err := st.Watermarks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := read(); len(m) != st.ExpiryShards() || m[0] != 0 || m[15] != 0 {
		t.Fatalf("new table: %v", m)
	}
	for _, step := range []struct {
		raise map[int]int64
		want  map[int]int64 // shards 0 and 1
	}{
		{map[int]int64{0: 10, 1: 20}, map[int]int64{0: 10, 1: 20}},
		{map[int]int64{0: 5}, map[int]int64{0: 10, 1: 20}},         // lower: kept
		{map[int]int64{0: 15, 1: 19}, map[int]int64{0: 15, 1: 20}}, // 1 overtaken: 0 still raised
	} {
		if err := st.AdvanceWatermarks(ctx, step.raise); err != nil {
			t.Fatal(err)
		}
		if m := read(); m[0] != step.want[0] || m[1] != step.want[1] || m[2] != 0 {
			t.Errorf("after %v: %v, want %v", step.raise, m, step.want)
		}
	}
	if a, err := st.Get(ctx, "", store.WatermarkID); err == nil || a != nil {
		t.Errorf("the watermark item reads as an action: %+v %v", a, err)
	}
}
