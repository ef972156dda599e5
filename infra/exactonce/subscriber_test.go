package exactonce

import (
	"fmt"
	"strings"
	"testing"
)

// TestExampleSubscriber: off by default; with Props.ExampleSubscriber the
// audit function gets a rule on the bus for the three event types, its own
// claims table with TTL, only the three item writes on it, and dead letters.
func TestExampleSubscriber(t *testing.T) {
	_, tmpl := synth(t, Props{})
	auditRules := func(tmpl map[string]any) map[string]map[string]any {
		out := map[string]map[string]any{}
		for id, r := range resources(tmpl, "AWS::Events::Rule") {
			if strings.HasPrefix(id, "AuditRule") {
				out[id] = r
			}
		}
		return out
	}
	if n := len(auditRules(tmpl)); n != 0 || strings.Contains(jsonOf(tmpl), "ExactOnce audit") {
		t.Fatalf("subscriber deployed by default (%d rules)", n)
	}

	_, tmpl = synth(t, Props{ExampleSubscriber: true, EventSource: "shop.exactonce"})
	rules := auditRules(tmpl)
	if len(rules) != 1 {
		t.Fatalf("%d rules", len(rules))
	}
	for _, r := range rules {
		p := props(r)
		if got := jsonOf(p["EventPattern"]); got != `{"detail-type":["action.consumed","action.canceled","action.expired","action.used","action.use_released"],"source":["shop.exactonce"]}` {
			t.Errorf("pattern %s", got)
		}
		if !strings.Contains(jsonOf(p["EventBusName"]), "Bus") {
			t.Errorf("rule not on the ExactOnce bus: %s", jsonOf(p["EventBusName"]))
		}
		target := jsonOf(p["Targets"])
		for _, want := range []string{"AuditFunction", "AuditDeadLetters", `"MaximumEventAgeInSeconds":86400`, `"MaximumRetryAttempts":185`} {
			if !strings.Contains(target, want) {
				t.Errorf("target lacks %s: %s", want, target)
			}
		}
	}

	var claims map[string]any
	for id, tbl := range resources(tmpl, "AWS::DynamoDB::Table") {
		if strings.HasPrefix(id, "AuditClaims") {
			claims = props(tbl)
		}
	}
	if claims == nil || jsonOf(claims["KeySchema"]) != `[{"AttributeName":"eventId","KeyType":"HASH"}]` ||
		jsonOf(claims["TimeToLiveSpecification"]) != `{"AttributeName":"ttl","Enabled":true}` || claims["BillingMode"] != "PAY_PER_REQUEST" {
		t.Errorf("claims table: %s", jsonOf(claims))
	}

	var fnEnv string
	for _, fn := range resources(tmpl, "AWS::Lambda::Function") {
		if props(fn)["Description"] == "ExactOnce audit" {
			fnEnv = jsonOf(props(fn)["Environment"])
		}
	}
	if !strings.Contains(fnEnv, `"DEDUPE_TABLE":{"Ref":"AuditClaims`) {
		t.Errorf("audit environment: %s", fnEnv)
	}
	var ddb []string
	for _, pol := range resources(tmpl, "AWS::IAM::Policy") {
		if !strings.Contains(jsonOf(props(pol)["Roles"]), `"AuditRole`) {
			continue
		}
		for _, st := range props(pol)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			st := st.(map[string]any)
			acts, ok := st["Action"].([]any)
			if !ok {
				acts = []any{st["Action"]}
			}
			for _, a := range acts {
				if strings.HasPrefix(a.(string), "dynamodb:") {
					ddb = append(ddb, a.(string))
					if !strings.Contains(jsonOf(st["Resource"]), "AuditClaims") || strings.Contains(jsonOf(st["Resource"]), "ActionsTable") {
						t.Errorf("%s on %s, want the claims table only", a, jsonOf(st["Resource"]))
					}
				}
			}
		}
	}
	if !sameSet(ddb, []string{"dynamodb:UpdateItem"}) { // events/once: every claim, done and release is one UpdateItem
		t.Errorf("audit DynamoDB actions %v", ddb)
	}

	var eic string
	for id, c := range resources(tmpl, "AWS::Lambda::EventInvokeConfig") {
		if strings.HasPrefix(id, "AuditFunction") {
			eic = jsonOf(c)
		}
	}
	if !strings.Contains(eic, `"MaximumRetryAttempts":2`) || !strings.Contains(eic, "AuditDeadLetters") {
		t.Errorf("async invoke config: %s", eic)
	}
	if perm := jsonOf(resources(tmpl, "AWS::Lambda::Permission")); !strings.Contains(perm, `"Principal":"events.amazonaws.com"`) {
		t.Errorf("EventBridge may not invoke the subscriber: %s", perm)
	}
	metrics := map[string]int{}
	for _, a := range resources(tmpl, "AWS::CloudWatch::Alarm") {
		metrics[fmt.Sprint(props(a)["Namespace"], "/", props(a)["MetricName"])]++
	}
	if metrics["AWS/Lambda/Errors"] != 15 || metrics["ExactOnce/EntriesFailed"] != 1 || metrics["AWS/SQS/ApproximateNumberOfMessagesVisible"] != 2 {
		t.Errorf("alarms with the subscriber: %v", metrics)
	}
	if tmpl["Outputs"].(map[string]any)["AuditClaimsTableName"] == nil {
		t.Error("no AuditClaimsTableName output")
	}
}
