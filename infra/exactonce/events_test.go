package exactonce

import (
	"strings"
	"testing"
)

func TestEventPlumbing(t *testing.T) {
	_, tmpl := synth(t, Props{})
	esms := resources(tmpl, "AWS::Lambda::EventSourceMapping")
	if len(esms) != 1 {
		t.Fatalf("%d event source mappings", len(esms))
	}
	for _, esm := range esms {
		p := props(esm)
		for k, want := range map[string]string{
			"StartingPosition":           `"TRIM_HORIZON"`,
			"BatchSize":                  `100`,
			"BisectBatchOnFunctionError": `false`,
			"MaximumRetryAttempts":       `-1`,
			"MaximumRecordAgeInSeconds":  `82800`,
			"FunctionResponseTypes":      `["ReportBatchItemFailures"]`,
			// Key items (key#…) and use records (ur#…) never invoke the publisher:
			// only action images carry userId, and gates (ug#…) carry the uses.
			"FilterCriteria": `{"Filters":[{"Pattern":"{\"dynamodb\":{\"NewImage\":{\"userId\":{\"S\":[{\"exists\":true}]}}}}"},` +
				`{"Pattern":"{\"dynamodb\":{\"OldImage\":{\"userId\":{\"S\":[{\"exists\":true}]}}}}"},` +
				`{"Pattern":"{\"dynamodb\":{\"Keys\":{\"actionId\":{\"S\":[{\"prefix\":\"ug#\"}]}}}}"}]}`,
		} {
			if got := jsonOf(p[k]); got != want {
				t.Errorf("%s = %s, want %s", k, got, want)
			}
		}
		if !strings.Contains(jsonOf(p["DestinationConfig"]), "PublisherOnFailure") {
			t.Errorf("on-failure destination: %s", jsonOf(p["DestinationConfig"]))
		}
	}
	for _, q := range resources(tmpl, "AWS::SQS::Queue") {
		if props(q)["SqsManagedSseEnabled"] != true {
			t.Errorf("queue SSE: %v", props(q))
		}
	}
	qp := jsonOf(resources(tmpl, "AWS::SQS::QueuePolicy"))
	if !strings.Contains(qp, `"aws:SecureTransport":"false"`) || !strings.Contains(qp, `"Effect":"Deny"`) {
		t.Errorf("queue does not enforce SSL: %s", qp)
	}
	if len(resources(tmpl, "AWS::Events::EventBus")) != 1 {
		t.Error("no event bus")
	}
	pub := ""
	for _, fn := range resources(tmpl, "AWS::Lambda::Function") {
		if props(fn)["Description"] == "ExactOnce publisher" {
			pub = jsonOf(props(fn)["Environment"])
		}
	}
	if !strings.Contains(pub, "EVENT_BUS_NAME") || !strings.Contains(pub, `"EVENT_SOURCE":"exactonce"`) || !strings.Contains(pub, `"ON_FAILURE_QUEUE_URL":{"Ref":"PublisherOnFailure`) {
		t.Errorf("publisher environment: %s", pub)
	}
}

// TestBusPolicy (issue 14, seen 3): only the publisher's and the republish
// function's roles may put events with ExactOnce's source on the bus.
func TestBusPolicy(t *testing.T) {
	_, tmpl := synth(t, Props{EventSource: "shop.exactonce"})
	pols := resources(tmpl, "AWS::Events::EventBusPolicy")
	if len(pols) != 1 {
		t.Fatalf("%d bus policies", len(pols))
	}
	for _, p := range pols {
		st := jsonOf(props(p)["Statement"])
		for _, want := range []string{`"Effect":"Deny"`, `"Principal":{"AWS":"*"}`, `"Action":"events:PutEvents"`,
			`"ForAnyValue:StringEquals":{"events:source":"shop.exactonce"}`,
			`"ArnNotEquals":{"aws:PrincipalArn":[{"Fn::GetAtt":["PublisherRole`, `{"Fn::GetAtt":["RepublishRole`} {
			if !strings.Contains(st, want) {
				t.Errorf("bus policy lacks %s: %s", want, st)
			}
		}
		if !strings.Contains(jsonOf(props(p)["EventBusName"]), `"Ref":"Bus`) {
			t.Errorf("policy not on the bus: %s", jsonOf(props(p)))
		}
	}
}
