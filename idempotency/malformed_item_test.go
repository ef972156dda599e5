package idempotency_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/idempotency"
)

// TestMalformedItemNeverRunsTheEffect: a key's item of a shape no store
// writes (attributes of other types, no ttl, numbers out of range) never
// runs the effect and never panics; only items that are claimable as they
// stand (released, or a lease long lapsed) run it once.
func TestMalformedItemNeverRunsTheEffect(t *testing.T) {
	table, _ := newTable(t)
	db := table.DB.(*dynamodb.Client)
	ctx := context.Background()
	fp := mustFP(t, nil)
	future := fmt.Sprint(time.Now().Add(time.Hour).Unix())
	futureMs := fmt.Sprint(time.Now().Add(time.Hour).UnixMilli())
	S := func(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
	N := func(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }
	cases := map[string]map[string]types.AttributeValue{
		"ttl as string":       {"fingerprint": S(fp), "ttl": S(future), "completedAt": S("2020-01-01T00:00:00.000Z"), "response": S(`{}`)},
		"fp as number":        {"fingerprint": N("1"), "ttl": N(future)},
		"token as number":     {"fingerprint": S(fp), "token": N("5"), "leaseExpiresAtMs": N(futureMs), "ttl": N(future)},
		"lease as string":     {"fingerprint": S(fp), "token": S("x"), "leaseExpiresAtMs": S("soon"), "ttl": N(future)},
		"completedAt garbage": {"fingerprint": S(fp), "completedAt": S("yes"), "response": S(`{}`), "ttl": N(future)},
		"completed no resp":   {"fingerprint": S(fp), "completedAt": S("2020-01-01T00:00:00.000Z"), "ttl": N(future)},
		"response number":     {"fingerprint": S(fp), "completedAt": S("2020-01-01T00:00:00.000Z"), "response": N("5"), "ttl": N(future)},
		"response not json":   {"fingerprint": S(fp), "completedAt": S("2020-01-01T00:00:00.000Z"), "response": S(`{{`), "ttl": N(future)},
		"attempts string rel": {"fingerprint": S(fp), "releasedToken": S("r"), "attempts": S("x"), "ttl": N(future)},
		"lastError num rel":   {"fingerprint": S(fp), "releasedToken": S("r"), "lastError": N("1"), "ttl": N(future)},
		"no ttl completed":    {"fingerprint": S(fp), "completedAt": S("2020-01-01T00:00:00.000Z"), "response": S(`{"charge":"x"}`)},
		"no ttl in progress":  {"fingerprint": S(fp), "token": S("t"), "leaseExpiresAtMs": N(futureMs)},
		"ttl huge":            {"fingerprint": S(fp), "token": S("t"), "leaseExpiresAtMs": N(futureMs), "ttl": N("99999999999999999999")},
		"lease huge":          {"fingerprint": S(fp), "token": S("t"), "leaseExpiresAtMs": N("99999999999999999999"), "ttl": N(future)},
		"ttl float":           {"fingerprint": S(fp), "token": S("t"), "leaseExpiresAtMs": N("1.5"), "ttl": N(future + ".5")},
		"released map":        {"fingerprint": S(fp), "releasedToken": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}, "ttl": N(future)},
	}
	for name, item := range cases {
		name := strings.ReplaceAll(name, " ", "-")
		t.Run(name, func(t *testing.T) {
			id := "bad:" + name
			item["id"] = S(id)
			if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table.Name, Item: item}); err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			h := idempotency.Wrap(func(ctx context.Context, o order) (receipt, error) {
				runs.Add(1)
				return receipt{Charge: "ran"}, nil
			}, idempotency.Options[order, receipt]{Store: table, Namespace: "bad", Key: orderID})
			for range 2 {
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("panic: %v", r)
						}
					}()
					r, err := h(ctx, order{ID: name})
					t.Logf("%+v %v", r, err)
				}()
			}
			// Released, or a lease long lapsed: the claim's write replaces
			// every malformed attribute. A malformed releasedToken stays (a
			// release re-sent later is explained by it), so that claim's
			// answer cannot be read and the effect does not run.
			claimable := name == "lastError-num-rel" || name == "ttl-float"
			if !claimable && runs.Load() != 0 || claimable && runs.Load() != 1 {
				out, _ := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table.Name, Key: map[string]types.AttributeValue{"id": S(id)}})
				t.Errorf("the effect ran %d times on a malformed item; item now %v", runs.Load(), out.Item)
			}
		})
	}
}
