package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/store"
)

// TestUserIndexStartKeyRefused: the start keys DynamoDB refuses on the user
// index (a key over 2 KB, attributes of the wrong type, key attributes
// missing, attributes added), sent to DynamoDB Local as a list page's start:
// each refusal is ErrBadCursor (400 naming cursor), never a fault (500). The
// API never sends one (parseCursor refuses such cursors first:
// httpapi's TestForgedUserCursor); this holds if one gets through.
func TestUserIndexStartKeyRefused(t *testing.T) {
	t.Parallel()
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
