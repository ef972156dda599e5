package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/tenant"
)

func rejected(err error, code action.Code) bool {
	var r *action.Rejection
	return errors.As(err, &r) && r.Code == code
}

// TestLegacyItemMigrates: an action written before gates kept every use on
// its own item and filled it (468 of the largest uses: ~396 KB); its next
// take moves the uses to gates (each held use answerable as before), the
// rest of maxUses can be taken, none twice, and a cancel still wins.
func TestLegacyItemMigrates(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	st := env.Sweeper.Store
	ctx := context.Background()
	now := time.Now()
	a := &action.Action{ID: "big", UserID: "u", ActiveAt: action.Millis(now.Add(-time.Minute)), ExpiresAt: action.Millis(now.Add(time.Hour)),
		CreatedAt: action.Millis(now), MaxUses: 1000, Payload: make([]byte, action.MaxPayloadBytes)}
	if _, err := st.Create(ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	// The legacy shape, as the single-item design wrote it (setup).
	item, err := env.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(env.Table), Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: "big"}}})
	if err != nil {
		t.Fatal(err)
	}
	reason := strings.Repeat("r", action.MaxReasonLen)
	id := func(i int) string { return fmt.Sprintf("%0128d", i) }
	key := func(i int) string { return fmt.Sprintf("%032x", i) }
	const filled = 468
	for i := range filled {
		item.Item["use:"+id(i)] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"at": &types.AttributeValueMemberS{Value: store.FormatTime(now.Add(time.Duration(i) * time.Millisecond))}, "reason": &types.AttributeValueMemberS{Value: reason},
			"k": &types.AttributeValueMemberS{Value: key(i)}, "f": &types.AttributeValueMemberS{Value: "kid:" + strings.Repeat("f", 64)}}}
		item.Item["useN:"+id(i)] = &types.AttributeValueMemberN{Value: fmt.Sprint(i + 1)}
		item.Item["useKey:"+key(i)] = &types.AttributeValueMemberS{Value: id(i)}
	}
	item.Item["usesHeld"] = &types.AttributeValueMemberN{Value: fmt.Sprint(filled)}
	if _, err := env.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(env.Table), Item: item.Item}); err != nil {
		t.Fatal(err)
	}
	// Read before any take: the count comes from the legacy item.
	if got, err := st.Get(ctx, "", a.ID); err != nil || got.UsesHeld != filled {
		t.Fatalf("legacy GET: %v, %v", got, err)
	}
	fp := "kid:" + strings.Repeat("f", 64)
	taken := 0
	for i := filled; i < 1100; i++ {
		_, err := st.Take(ctx, a.ID, store.Take{UseID: id(i), Reason: reason, Write: action.Write{Key: key(i), Fingerprint: fp}, Fingerprints: []string{fp}, Now: time.Now()})
		if rejected(err, action.CodeNoUsesLeft) {
			break
		}
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		taken++
	}
	if taken != 1000-filled {
		t.Fatalf("%d new takes after %d legacy uses, want %d", taken, filled, 1000-filled)
	}
	got, err := st.Get(ctx, "", a.ID)
	if err != nil || got.UsesHeld != 1000 {
		t.Fatalf("after the takes: %v, %v", got, err)
	}
	raw, _ := env.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(env.Table), Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: "big"}}})
	for name := range raw.Item {
		if strings.HasPrefix(name, "use:") || strings.HasPrefix(name, "useN:") || strings.HasPrefix(name, "useKey:") || name == "usesHeld" {
			t.Fatalf("the migrated item still has %s", name)
		}
	}
	// A legacy use answers as its first take, by useId and by its key.
	for _, w := range []action.Write{{}, {Key: key(3), Fingerprint: fp}} {
		r, err := st.Take(ctx, a.ID, store.Take{UseID: id(3), Write: w, Fingerprints: []string{fp}, Now: time.Now()})
		if err != nil || !r.Replayed || !r.UsedAt.Equal(action.Millis(now.Add(3*time.Millisecond))) {
			t.Fatalf("legacy use 3 again (%+v): %+v, %v", w, r, err)
		}
	}
	if _, err := st.Cancel(ctx, a.ID, store.Cancel{Reason: "done", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Take(ctx, a.ID, store.Take{UseID: "late", Now: time.Now()}); !rejected(err, action.CodeCanceled) {
		t.Fatalf("take after the cancel: %v", err)
	}
}

// TestGateFitsOneWriteUnit: a full gate of the longest action id under the
// longest tenant name stays under 1 KB, so a take or a release costs one
// write unit on it, at any maxUses.
func TestGateFitsOneWriteUnit(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	st := env.Sweeper.Store
	ctx := context.Background()
	now := time.Now()
	tn := strings.Repeat("t", tenant.MaxNameLen)
	a := &action.Action{Tenant: tn, ID: strings.Repeat("a", action.MaxIDLen), UserID: "u", ActiveAt: action.Millis(now.Add(-time.Minute)),
		ExpiresAt: action.Millis(now.Add(time.Hour)), CreatedAt: action.Millis(now), MaxUses: action.GateSeats, Releasable: true}
	if _, err := st.Create(ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	env.Capacity.Take()
	for i := range action.GateSeats {
		if _, err := st.Take(ctx, a.ID, store.Take{Tenant: tn, UseID: fmt.Sprintf("%0128d", i), Write: action.Write{Key: fmt.Sprintf("%064x", i)}, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	units := env.Capacity.Take()
	if u := units["UpdateItem"]; u.Table != float64(2*action.GateSeats) {
		t.Fatalf("%d takes to the full gate: %+v (want %d write units: a record and a gate write each)", action.GateSeats, units, 2*action.GateSeats)
	}
	if _, err := st.Release(ctx, a.ID, store.Release{Tenant: tn, UseID: fmt.Sprintf("%0128d", 0), Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if u := env.Capacity.Take()["UpdateItem"]; u.Table != 2 {
		t.Fatalf("a release of a full gate: %+v write units, want 2", u)
	}
}
