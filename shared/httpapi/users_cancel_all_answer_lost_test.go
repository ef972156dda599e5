package httpapi_test

// A cancel-all without an Idempotency-Key whose cancel write applied but
// whose answer was lost: the SDK re-sends the write, which then finds the
// action canceled by this very request (its request id and body). The
// call's answer is "what this call canceled" (docs/http-api.md, A user's
// actions): the action must be in it.

import (
	"slices"
	"testing"
)

// TestUnkeyedCancelAllAnswerLostStillListsWhatItCanceled: the cancel write's
// answer is lost once (the SDK re-sends it); the action ends canceled by
// this call, with its reason, and the 200 must count and name it.
func TestUnkeyedCancelAllAnswerLostStillListsWhatItCanceled(t *testing.T) {
	t.Parallel()
	env, p := proxied(t)
	create(t, env, `{"actionId":"lost-1","userId":"lost-u"}`)
	create(t, env, `{"actionId":"lost-2","userId":"lost-u"}`)
	p.PassThenDrop(0, 1) // the first cancel write applies, its answer is lost
	r := do(t, env, "POST", "/users/lost-u/actions/cancel", `{"reason":"signout"}`)
	p.PassThenDrop(0, 0)
	t.Logf("unkeyed cancel-all, one cancel answer lost: %d %s", r.Status, r.Raw)
	if p.Counts().Dropped != 1 {
		t.Fatalf("the proxy dropped %d answers, want 1", p.Counts().Dropped)
	}
	var canceledHere []string
	for _, id := range []string{"lost-1", "lost-2"} {
		g := do(t, env, "GET", "/actions/"+id, "")
		t.Logf("%s: %s", id, g.Raw)
		if g.Str("canceledAt") != "" && g.Str("cancelReason") == "signout" {
			canceledHere = append(canceledHere, id)
		}
	}
	if len(canceledHere) != 2 {
		t.Fatalf("canceled by the call: %v, want both", canceledHere)
	}
	var listed []string
	for _, id := range r.Body["actionIds"].([]any) {
		listed = append(listed, id.(string))
	}
	if r.Status != 200 || r.Body["canceled"] != 2.0 || !slices.Equal(listed, canceledHere) {
		t.Fatalf("cancel-all answered %d %s; it canceled %v (nobody else canceled anything)", r.Status, r.Raw, canceledHere)
	}
}

// TestUnkeyedCancelAllAnswerLostOnMultiUse: the same for a multi-use action,
// whose cancel is a refused write, one write per gate, then the action's
// write: that last write's answer is lost.
func TestUnkeyedCancelAllAnswerLostOnMultiUse(t *testing.T) {
	t.Parallel()
	env, p := proxied(t)
	create(t, env, `{"actionId":"lost-m","userId":"lost-mu","maxUses":2}`)
	if r := do(t, env, "POST", "/actions/lost-m/consume", `{"useId":"a"}`); r.Status != 200 {
		t.Fatalf("take: %d %s", r.Status, r.Raw)
	}
	p.PassThenDrop(2, 1) // the refused single-use write and the gate pass; the action's write loses its answer
	r := do(t, env, "POST", "/users/lost-mu/actions/cancel", `{"reason":"signout"}`)
	p.PassThenDrop(0, 0)
	g := do(t, env, "GET", "/actions/lost-m", "")
	t.Logf("cancel-all: %d %s; action: %s; dropped %d", r.Status, r.Raw, g.Raw, p.Counts().Dropped)
	if p.Counts().Dropped != 1 || g.Str("canceledAt") == "" || g.Str("cancelReason") != "signout" {
		t.Fatalf("setup: dropped %d, action %s", p.Counts().Dropped, g.Raw)
	}
	if r.Status != 200 || r.Body["canceled"] != 1.0 {
		t.Fatalf("cancel-all canceled lost-m but answered %d %s", r.Status, r.Raw)
	}
}
