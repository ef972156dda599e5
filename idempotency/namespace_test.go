package idempotency_test

import (
	"context"
	"testing"

	"github.com/exactonce/exactonce/idempotency"
)

type refund struct {
	ID string `json:"id"`
}

// handleGeneric[order] and handleGeneric[refund] are two instantiations of one generic handler.
func handleGeneric[T any](ctx context.Context, in T) (string, error) {
	var zero T
	switch any(zero).(type) {
	case order:
		return "charged", nil
	}
	return "refunded", nil
}

// Two functions whose names are not ASCII, of the same length.
func 支払(ctx context.Context, o order) (string, error) { return "paid", nil }
func 返金(ctx context.Context, o order) (string, error) { return "refunded", nil }

// TestDefaultNamespacesNeverShareAKey: "no Namespace: the wrapped function's
// name …, so two functions on one table never share a key"
// (docs/idempotency.md). Before the fix two instantiations of one generic
// function, or two functions with names of other letters than ASCII of one
// length, mapped to one namespace: the refund replayed the charge's answer.
func TestDefaultNamespacesNeverShareAKey(t *testing.T) {
	table, _ := newTable(t)
	ctx := context.Background()
	t.Run("generic instantiations", func(t *testing.T) {
		charge := idempotency.Wrap(handleGeneric[order], idempotency.Options[order, string]{Store: table, Key: orderID})
		ref := idempotency.Wrap(handleGeneric[refund], idempotency.Options[refund, string]{Store: table,
			Key: func(r refund) (string, error) { return r.ID, nil }})
		ca, oa := idempotency.WithOutcome(ctx)
		cb, ob := idempotency.WithOutcome(ctx)
		a, errA := charge(ca, order{ID: "42"})
		b, errB := ref(cb, refund{ID: "42"})
		if b != "refunded" || ob.Replayed {
			t.Errorf("charge %q %v (key %q); refund %q %v (key %q, replayed %v): the refund got the charge's response", a, errA, oa.Key, b, errB, ob.Key, ob.Replayed)
		}
	})
	t.Run("names not ASCII", func(t *testing.T) {
		pay := idempotency.Wrap(支払, idempotency.Options[order, string]{Store: table, Key: orderID})
		ref := idempotency.Wrap(返金, idempotency.Options[order, string]{Store: table, Key: orderID})
		ca, oa := idempotency.WithOutcome(ctx)
		cb, ob := idempotency.WithOutcome(ctx)
		a, errA := pay(ca, order{ID: "42"})
		b, errB := ref(cb, order{ID: "42"})
		if b != "refunded" || ob.Replayed {
			t.Errorf("pay %q %v (key %q); refund %q %v (key %q, replayed %v): the refund got the payment's response", a, errA, oa.Key, b, errB, ob.Key, ob.Replayed)
		}
	})
}

// TestNumberAndStringKeysAreOneKey holds a documented difference from
// Powertools (docs/idempotency.md, "key value types"): a key is its text,
// so the number 1 and the string "1" are one key, as are an array and the
// string of its JSON. Powertools hashes json.dumps / JSON.stringify of the
// key, which keeps them apart.
func TestNumberAndStringKeysAreOneKey(t *testing.T) {
	type ev = map[string]any
	k := idempotency.KeyJMESPath[ev]("id")
	a, _ := k(ev{"id": 1})
	b, _ := k(ev{"id": "1"})
	c, _ := k(ev{"id": []any{"a"}})
	d, _ := k(ev{"id": `["a"]`})
	if a != b || c != d {
		t.Errorf("keys: 1 → %q, \"1\" → %q; [\"a\"] → %q, the string `[\"a\"]` → %q", a, b, c, d)
	}
}
