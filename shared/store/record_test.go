package store_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/shared/store"
)

// TestDecodeRecord: a use record as the store writes it decodes to what it
// holds; one that lacks its useId, is not under a record key, or holds a
// time that is not a number is an error, never a record.
func TestDecodeRecord(t *testing.T) {
	S := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	N := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	item := func(change func(map[string]types.AttributeValue)) map[string]types.AttributeValue {
		m := map[string]types.AttributeValue{
			"actionId": S("ur#0123456789ab#t#acme#a1"), "op": S("take"), "a": N("1700000000000"), "u": S("device-1"),
			"q": N("1700000000100"), "k": S("kd"), "f": S("fp"), "rq": S("req"), "ua": N("1700000000200"),
			"ra": N("1700000000300"), "rk": S("rel"), "ttl": N("1800000000"),
		}
		if change != nil {
			change(m)
		}
		return m
	}
	r, err := store.DecodeRecord(item(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r.Ref != "0123456789ab" || r.Op != "take" || r.UseID != "device-1" || r.Write.Key != "kd" || r.Write.Fingerprint != "fp" ||
		r.Write.RequestID != "req" || r.Release.Key != "rel" || r.Outcome != "" ||
		!r.RequestedAt.Equal(time.UnixMilli(1700000000100)) || !r.UsedAt.Equal(time.UnixMilli(1700000000200)) ||
		!r.ReleasedAt.Equal(time.UnixMilli(1700000000300)) || r.UsedAt.Location() != time.UTC {
		t.Fatalf("decoded %+v", r)
	}
	for _, c := range []struct {
		what   string
		change func(map[string]types.AttributeValue)
	}{
		{"no useId", func(m map[string]types.AttributeValue) { delete(m, "u") }},
		{"not a record's key", func(m map[string]types.AttributeValue) { m["actionId"] = S("t#acme#a1") }},
		{"no key", func(m map[string]types.AttributeValue) { delete(m, "actionId") }},
		{"usedAt a string", func(m map[string]types.AttributeValue) { m["ua"] = S("yesterday") }},
		{"requestedAt not an integer", func(m map[string]types.AttributeValue) { m["q"] = N("1.5") }},
	} {
		if r, err := store.DecodeRecord(item(c.change)); err == nil {
			t.Errorf("%s: decoded %+v, want an error", c.what, r)
		}
	}
}
