package idempotency_test

import (
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/idempotency"
)

func TestKeyPath(t *testing.T) {
	t.Parallel()
	ev := events.APIGatewayV2HTTPRequest{
		Headers: map[string]string{"idempotency-key": "k-1"},
		Body:    `{"order":{"id":"o-9","items":[{"sku":"a"},{"sku":"b"}]},"amount":12.50}`,
	}
	for _, c := range []struct{ path, want string }{
		{"headers.idempotency-key", "k-1"},
		{"body.order.id", "o-9"},
		{"body.order.items.1.sku", "b"},
		{"body.amount", "12.50"}, // numbers keep their text
		{"body.order.items.0", `{"sku":"a"}`},
		{"body.nothing", ""},
		{"body.order.items.7", ""},
		{"headers.other", ""},
	} {
		got, err := idempotency.KeyPath[events.APIGatewayV2HTTPRequest](c.path)(ev)
		if err != nil || got != c.want {
			t.Errorf("KeyPath(%q) = %q, %v; want %q", c.path, got, err, c.want)
		}
	}
	bad := events.APIGatewayV2HTTPRequest{Body: "not json"}
	if _, err := idempotency.KeyPath[events.APIGatewayV2HTTPRequest]("body.id")(bad); err == nil {
		t.Error("a path into a body that is not JSON: no error")
	}
}

func TestPayloadPaths(t *testing.T) {
	t.Parallel()
	pick := idempotency.PayloadPaths[events.APIGatewayV2HTTPRequest]("body.amount", "body.card")
	fp := func(body string) string {
		v, err := pick(events.APIGatewayV2HTTPRequest{Body: body, RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: body}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := idempotency.Fingerprint(v, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := fp(`{"amount":5,"card":"tok_1","note":"x"}`)
	if b := fp(`{"note":"y", "card":"tok_1","amount":5}`); a != b {
		t.Error("fields outside the paths, key order or spacing changed the fingerprint")
	}
	if c := fp(`{"amount":6,"card":"tok_1"}`); a == c {
		t.Error("a changed amount kept the fingerprint")
	}
}
