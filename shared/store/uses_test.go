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
)

// TestTakeWhenTheItemIsFull: maxUses 1000 with the largest uses (128-byte
// useIds, a 256-character reason, an Idempotency-Key each) outgrows
// DynamoDB's 400 KB item before 1000 uses: the take that does not fit is
// answered 409 no_uses_left (nothing written), never a 500, and the uses
// held stay answerable.
func TestTakeWhenTheItemIsFull(t *testing.T) {
	env := testkit.NewEnv(t)
	st := env.Sweeper.Store
	ctx := context.Background()
	now := time.Now()
	a := &action.Action{ID: "big", UserID: "u", ActiveAt: action.Millis(now.Add(-time.Minute)), ExpiresAt: action.Millis(now.Add(time.Hour)),
		CreatedAt: action.Millis(now), MaxUses: action.MaxUsesLimit, Payload: make([]byte, action.MaxPayloadBytes)}
	if _, err := st.Create(ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	// Fill the item to ~396 KB with 468 of the largest uses in one raw
	// write (setup), then take until the item is full.
	item, err := env.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(env.Table), Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: "big"}}})
	if err != nil {
		t.Fatal(err)
	}
	reason := strings.Repeat("r", action.MaxReasonLen)
	id := func(i int) string { return fmt.Sprintf("%0128d", i) }
	use := func(i int) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"at": &types.AttributeValueMemberS{Value: store.FormatTime(now)}, "reason": &types.AttributeValueMemberS{Value: reason},
			"k": &types.AttributeValueMemberS{Value: fmt.Sprintf("%032x", i)}, "f": &types.AttributeValueMemberS{Value: "kid:" + strings.Repeat("f", 64)}}
	}
	const filled = 468
	for i := range filled {
		item.Item["use:"+id(i)] = &types.AttributeValueMemberM{Value: use(i)}
		item.Item["useN:"+id(i)] = &types.AttributeValueMemberN{Value: fmt.Sprint(i + 1)}
		item.Item["useKey:"+fmt.Sprintf("%032x", i)] = &types.AttributeValueMemberS{Value: id(i)}
	}
	item.Item["usesHeld"] = &types.AttributeValueMemberN{Value: fmt.Sprint(filled)}
	if _, err := env.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(env.Table), Item: item.Item}); err != nil {
		t.Fatal(err)
	}
	taken := filled
	for i := filled; i < action.MaxUsesLimit; i++ {
		key := fmt.Sprintf("%032x", i)
		_, err := st.Take(ctx, a.ID, store.Take{UseID: id(i), Reason: reason, Write: action.Write{Key: key, Fingerprint: "kid:" + strings.Repeat("f", 64)}, Now: time.Now()})
		var rej *action.Rejection
		if errors.As(err, &rej) && rej.Code == action.CodeNoUsesLeft {
			break
		}
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		taken++
	}
	if taken == action.MaxUsesLimit {
		t.Fatalf("1000 of the largest uses fit in one item: the test needs larger ones")
	}
	got, err := st.Get(ctx, "", a.ID)
	if err != nil || got.UsesHeld != taken || len(got.HeldUses()) != taken {
		t.Fatalf("after %d takes: %v, %v", taken, got.UsesHeld, err)
	}
	if _, err := st.Take(ctx, a.ID, store.Take{UseID: id(0), Now: time.Now()}); !errors.As(err, new(*action.Replay)) {
		t.Fatalf("a held use on a full item: %v, want its replay", err)
	}
	t.Logf("the item took %d of the largest uses before it was full", taken)
}
