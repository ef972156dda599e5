package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
)

// TestCancelAllKeyScope: a keyed cancel-all recognises, on a retry, the
// actions it canceled under its scoped key, and those it canceled before
// keys were scoped (BareKey, with its own fingerprint); an action canceled
// by a cancel of one action with the bare key is another call's: neither
// answered as this call's nor refused.
func TestCancelAllKeyScope(t *testing.T) {
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
	call := store.CancelAll{UserID: "u", Reason: "sign out", Write: action.Write{Key: "scoped", Fingerprint: "fp-all"}, BareKey: "bare",
		Fingerprints: []string{"fp-all"}, Now: now}
	for i := range 2 {
		ids, err := st.CancelUser(ctx, call)
		if err != nil || !slices.Equal(ids, []string{"s2", "s3", "s4"}) {
			t.Fatalf("call %d: %v %v, want s2 (canceled by this call before keys were scoped), s3, s4", i, ids, err)
		}
	}
	call.BareKey = ""
	if ids, err := st.CancelUser(ctx, call); err != nil || !slices.Equal(ids, []string{"s3", "s4"}) {
		t.Fatalf("without the bare key: %v %v, want s3, s4", ids, err)
	}
}

// TestUserIndexStartKeyRefused: the start keys DynamoDB refuses on the user
// index (a key over 2 KB, attributes of the wrong type, key attributes
// missing, attributes added), sent to DynamoDB Local as a list page's start:
// each refusal is ErrBadCursor (400 naming cursor), never a fault (500). The
// API never sends one (parseCursor refuses such cursors first:
// httpapi's TestForgedUserCursor); this holds if one gets through.
func TestUserIndexStartKeyRefused(t *testing.T) {
	env := testkit.NewEnv(t)
	st := env.Sweeper.Store
	ctx := context.Background()
	if r := testkit.Do(t, nil, "POST", env.URL+"/actions", `{"actionId":"i1","userId":"iu"}`); r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	S := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	N := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	user := S("u##iu") // tenant.Default's user iu
	long := strings.Repeat("x", 3000)
	refusedByDynamoDB := 0
	for _, c := range []struct {
		what string
		from map[string]types.AttributeValue
	}{
		{"the start key as a page has it", map[string]types.AttributeValue{"userKey": user, "createdAtMs": N("1"), "actionId": S("i1")}},
		{"a partition key over 2 KB", map[string]types.AttributeValue{"userKey": user, "createdAtMs": N("1"), "actionId": S(long)}},
		{"an index key over 2 KB", map[string]types.AttributeValue{"userKey": S("u##" + long), "createdAtMs": N("1"), "actionId": S("i1")}},
		{"the time a string", map[string]types.AttributeValue{"userKey": user, "createdAtMs": S("1"), "actionId": S("i1")}},
		{"the key a number", map[string]types.AttributeValue{"userKey": user, "createdAtMs": N("1"), "actionId": N("1")}},
		{"the user a number", map[string]types.AttributeValue{"userKey": N("1"), "createdAtMs": N("1"), "actionId": S("i1")}},
		{"no time", map[string]types.AttributeValue{"userKey": user, "actionId": S("i1")}},
		{"no key", map[string]types.AttributeValue{"userKey": user, "createdAtMs": N("1")}},
		{"no user", map[string]types.AttributeValue{"createdAtMs": N("1"), "actionId": S("i1")}},
		{"an attribute added", map[string]types.AttributeValue{"userKey": user, "createdAtMs": N("1"), "actionId": S("i1"), "kind": S("x")}},
		{"another user", map[string]types.AttributeValue{"userKey": S("u##other"), "createdAtMs": N("1"), "actionId": S("i1")}},
	} {
		err := st.QueryUserFrom(ctx, "", "iu", c.from)
		switch {
		case err == nil:
			t.Logf("%s: DynamoDB Local takes it", c.what)
		case errors.Is(err, store.ErrBadCursor):
			refusedByDynamoDB++
		default:
			t.Errorf("%s: %v, want ErrBadCursor", c.what, err)
		}
	}
	t.Logf("start keys DynamoDB Local refused, each answered as a bad cursor: %d", refusedByDynamoDB)
	if refusedByDynamoDB == 0 {
		t.Error("DynamoDB Local refused none of the shapes: the test shows nothing")
	}
}
