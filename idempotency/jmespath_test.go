package idempotency_test

import (
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/idempotency"
)

// TestKeyJMESPathReadsTheEvent: keys from an API Gateway event's headers and
// from the JSON in its body (powertools_json), as Powertools users write them.
func TestKeyJMESPathReadsTheEvent(t *testing.T) {
	ev := events.APIGatewayV2HTTPRequest{
		Headers: map[string]string{"idempotency-key": "k-1"},
		Body:    `{"order":{"id":"o-9","items":[{"sku":"a"},{"sku":"b"}]},"amount":12.50,"big":9007199254740993}`,
	}
	for _, c := range []struct{ expr, want string }{
		{`headers."idempotency-key"`, "k-1"},
		{"powertools_json(body).order.id", "o-9"},
		{"powertools_json(body).order.items[1].sku", "b"},
		{"powertools_json(body).amount", "12.5"},          // a double holds it: JMESPath's number
		{"powertools_json(body).big", "9007199254740993"}, // no double holds it: its text stays
		{"powertools_json(body).order.items[0]", `{"sku":"a"}`},
		{"powertools_json(body).nothing", ""},
		{"powertools_json(body).order.items[7]", ""},
		{`headers."other"`, ""},
	} {
		got, err := idempotency.KeyJMESPath[events.APIGatewayV2HTTPRequest](c.expr)(ev)
		if err != nil || got != c.want {
			t.Errorf("KeyJMESPath(%q) = %q, %v; want %q", c.expr, got, err, c.want)
		}
	}
	bad := events.APIGatewayV2HTTPRequest{Body: "not json"}
	if _, err := idempotency.KeyJMESPath[events.APIGatewayV2HTTPRequest]("powertools_json(body).id")(bad); err == nil {
		t.Error("powertools_json of a body that is not JSON: no error")
	}
}

// TestPayloadJMESPathPicksFields: only the picked fields make the payload's
// fingerprint; other fields, key order and spacing do not.
func TestPayloadJMESPathPicksFields(t *testing.T) {
	pick := idempotency.PayloadJMESPath[events.APIGatewayV2HTTPRequest]("powertools_json(body).[amount, card]")
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
		t.Error("fields outside the expression, key order or spacing changed the fingerprint")
	}
	if c := fp(`{"amount":6,"card":"tok_1"}`); a == c {
		t.Error("a changed amount kept the fingerprint")
	}
}
