package sweep_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/action"
)

// TestOneUnreadableItemDoesNotStallItsShard: one item of a shard that the
// sweeper cannot read (here its consumedAt is a number, not a time) does
// not keep the rest of the shard from expiring: the 600 other actions due
// behind it are marked. Before the fix Expire decoded the refused write's
// old item, its error failed the page, and the shard's watermark never
// moved: 101 actions were never swept and every run read 500 entries again.
func TestOneUnreadableItemDoesNotStallItsShard(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, func(o *server.Options) { o.ExpiryShards = 1 })
	st := env.Sweeper.Store
	base := action.Millis(time.Now().Add(time.Hour))
	n := 601
	createMany(t, st, "s", n, func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) })
	// s00000, due first, is damaged: consumedAt holds a number.
	_, err := env.DB.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(env.Table), Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: "s00000"}},
		UpdateExpression:          aws.String("SET consumedAt = :t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberN{Value: "1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	expired := 0
	for run := range 5 {
		env.Sweeper.Now = func() time.Time { return base.Add(time.Duration(run+1) * time.Minute) }
		r, err := env.Sweeper.Run(context.Background())
		t.Logf("run %d: %+v err %v", run, r, err)
		expired += r.Expired
	}
	open := 0
	for i := 1; i < n; i++ {
		a, err := st.Get(context.Background(), "", fmt.Sprintf("s%05d", i))
		if err != nil {
			t.Fatal(err)
		}
		if a.ExpiredAt.IsZero() {
			open++
		}
	}
	marks, _ := st.Watermarks(context.Background())
	if open > 0 {
		t.Fatalf("after 5 sweeps %d of the %d readable due actions are still open (%d expired; watermarks %v, want past %d)", open, n-1, expired, marks, base.UnixMilli())
	}
}
