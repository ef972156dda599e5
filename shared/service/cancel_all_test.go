package service_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/service"
	"github.com/exactonce/exactonce/shared/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestCancelAllKeyScope: a keyed cancel-all recognises, on a retry, the
// actions it canceled under its scoped key, and those it canceled before
// keys were scoped (BareKey, with its own fingerprint); an action canceled
// by a cancel of one action with the bare key is another call's: neither
// answered as this call's nor refused.
func TestCancelAllKeyScope(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	st := env.Sweeper.Store
	ctx := context.Background()
	for _, id := range []string{"s1", "s2", "s3", "s4"} {
		if r := testkit.Do(t, nil, "POST", env.URL+"/actions", fmt.Sprintf(`{"actionId":%q,"userId":"u"}`, id)); r.Status != 201 {
			t.Fatalf("create %s: %d %s", id, r.Status, r.Raw)
		}
	}
	now := time.Now()
	// A cancel of one action with the bare key (another call).
	if _, err := st.Cancel(ctx, "s1", store.Cancel{Reason: "lost", Write: action.Write{Key: "bare", Fingerprint: "fp-cancel"}, Fingerprints: []string{"fp-cancel"}, Now: now}); err != nil {
		t.Fatal(err)
	}
	// A cancel-all as it was written before keys were scoped: the bare key.
	if _, err := st.Cancel(ctx, "s2", store.Cancel{Reason: "sign out", Write: action.Write{Key: "bare", Fingerprint: "fp-all"}, Fingerprints: []string{"fp-all"}, Now: now}); err != nil {
		t.Fatal(err)
	}
	call := service.CancelAll{UserID: "u", Reason: "sign out", Write: action.Write{Key: "scoped", Fingerprint: "fp-all"}, BareKey: "bare",
		Fingerprints: []string{"fp-all"}, Now: now}
	for i := range 2 {
		ids, err := service.CancelUser(ctx, st, call)
		if err != nil || !slices.Equal(ids, []string{"s2", "s3", "s4"}) {
			t.Fatalf("call %d: %v %v, want s2 (canceled by this call before keys were scoped), s3, s4", i, ids, err)
		}
	}
	call.BareKey = ""
	if ids, err := service.CancelUser(ctx, st, call); err != nil || !slices.Equal(ids, []string{"s3", "s4"}) {
		t.Fatalf("without the bare key: %v %v, want s3, s4", ids, err)
	}
}
