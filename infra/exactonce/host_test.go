package exactonce

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/exactonce/exactonce/events"
)

// TestHostApp builds a host app that embeds ExactOnce next to its own
// resources and wires it: its role granted the consume route may invoke that
// route and no other, its rule on the bus takes action.consumed events to
// its queue, its pager gets every alarm; ExactOnce stays cdk-nag clean.
func TestHostApp(t *testing.T) {
	var stack awscdk.Stack
	var tmpl map[string]any
	must(t, func() {
		app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
		stack = awscdk.NewStack(app, jsii.String("Shop"), nil)
		eo := New(stack, "Actions", &Props{Code: AssetCode(placeholders)})

		checkout := awsiam.NewRole(stack, jsii.String("Checkout"), &awsiam.RoleProps{
			AssumedBy: awsiam.NewServicePrincipal(jsii.String("ecs-tasks.amazonaws.com"), nil),
		})
		eo.GrantInvoke(checkout, "consume")
		consumed := awssqs.NewQueue(stack, jsii.String("Consumed"), &awssqs.QueueProps{EnforceSSL: jsii.Bool(true)})
		awsevents.NewRule(stack, jsii.String("ConsumedToQueue"), &awsevents.RuleProps{
			EventBus:     eo.Bus,
			EventPattern: eo.EventPattern(events.TypeConsumed),
			Targets:      &[]awsevents.IRuleTarget{awseventstargets.NewSqsQueue(consumed, nil)},
		})
		pager := awssns.NewTopic(stack, jsii.String("Pager"), nil)
		eo.AddAlarmAction(awscloudwatchactions.NewSnsAction(pager))

		awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(nil), nil)
		tmpl = *assertions.Template_FromStack(stack, nil).ToJSON()
	})

	id := func(typ, prefix string) string {
		var ids []string
		for id := range resources(tmpl, typ) {
			if strings.HasPrefix(id, prefix) {
				ids = append(ids, id)
			}
		}
		if len(ids) != 1 {
			t.Fatalf("%s %s*: %v", typ, prefix, ids)
		}
		return ids[0]
	}
	api, bus, role, queue, pager := id("AWS::ApiGatewayV2::Api", "Actions"), id("AWS::Events::EventBus", "Actions"),
		id("AWS::IAM::Role", "Checkout"), id("AWS::SQS::Queue", "Consumed"), id("AWS::SNS::Topic", "Pager")

	// Every execute-api statement in the template: the one grant, on the host role.
	var grants []string
	for _, pol := range resources(tmpl, "AWS::IAM::Policy") {
		for _, st := range props(pol)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			if s := jsonOf(st); strings.Contains(s, "execute-api") {
				grants = append(grants, jsonOf(props(pol)["Roles"])+" "+s)
			}
		}
	}
	wantArn := "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${" + api + "}/*/POST/actions/*/consume"
	if len(grants) != 1 || !strings.HasPrefix(grants[0], `[{"Ref":"`+role+`"}] {"Action":"execute-api:Invoke","Effect":"Allow","Resource":`) {
		t.Fatalf("execute-api grants: %v", grants)
	}
	var st map[string]any
	for _, pol := range resources(tmpl, "AWS::IAM::Policy") {
		if jsonOf(props(pol)["Roles"]) == `[{"Ref":"`+role+`"}]` {
			sts := props(pol)["PolicyDocument"].(map[string]any)["Statement"].([]any)
			if len(sts) != 1 {
				t.Fatalf("host role statements: %s", jsonOf(sts))
			}
			st = sts[0].(map[string]any)
		}
	}
	arn := render(st["Resource"])
	if arn != wantArn {
		t.Fatalf("granted %s, want %s", arn, wantArn)
	}
	// What that ARN lets the role call, route by route (the ARN API Gateway
	// checks: api/stage/METHOD/path, path parameters filled in).
	for _, r := range Routes {
		path := regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(r.Path, "a-1")
		call := "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${" + api + "}/$default/" + string(r.Method) + path
		if allowed := iamMatch(arn, call); allowed != (r.Function == "consume") {
			t.Errorf("%s %s: allowed = %v", r.Method, r.Path, allowed)
		}
	}

	// The host's rule is on ExactOnce's bus and sends action.consumed to its queue.
	rule := props(resources(tmpl, "AWS::Events::Rule")[id("AWS::Events::Rule", "ConsumedToQueue")])
	if got := jsonOf(rule["EventBusName"]); got != `{"Ref":"`+bus+`"}` {
		t.Errorf("rule on %s, want the ExactOnce bus %s", got, bus)
	}
	if got := jsonOf(rule["EventPattern"]); got != `{"detail-type":["action.consumed"],"source":["exactonce"]}` {
		t.Errorf("rule pattern %s", got)
	}
	if !strings.Contains(jsonOf(rule["Targets"]), queue) {
		t.Errorf("rule targets %s", jsonOf(rule["Targets"]))
	}

	// Every ExactOnce alarm pages the host.
	alarms := resources(tmpl, "AWS::CloudWatch::Alarm")
	if len(alarms) != 18 {
		t.Errorf("%d alarms", len(alarms))
	}
	for id, a := range alarms {
		if jsonOf(props(a)["AlarmActions"]) != `[{"Ref":"`+pager+`"}]` {
			t.Errorf("alarm %s actions %s", id, jsonOf(props(a)["AlarmActions"]))
		}
	}

	// ExactOnce's resources are all under its construct; cdk-nag finds
	// nothing there (the host's own resources are the host's business).
	must(t, func() {
		errs := assertions.Annotations_FromStack(stack).FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*")))
		for _, e := range *errs {
			if strings.HasPrefix(*e.Id, "/Shop/Actions/") {
				t.Errorf("nag error at %s: %v", *e.Id, e.Entry.Data)
			} else {
				t.Logf("host resource: %s: %v", *e.Id, e.Entry.Data)
			}
		}
	})
}

// TestGrantInvokeNeedsIAM: with JWT auth a grant would mean nothing.
func TestGrantInvokeNeedsIAM(t *testing.T) {
	var msg any
	must(t, func() {
		stack := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("Shop"), nil)
		p := fullProps()
		eo := New(stack, "Actions", &Props{Code: AssetCode(placeholders), Auth: AuthJWT, JwtIssuer: p.JwtIssuer, JwtAudience: p.JwtAudience})
		role := awsiam.NewRole(stack, jsii.String("Checkout"), &awsiam.RoleProps{AssumedBy: awsiam.NewAccountRootPrincipal()})
		func() {
			defer func() { msg = recover() }()
			eo.GrantInvoke(role, "consume")
		}()
	})
	if msg == nil || !strings.Contains(fmt.Sprint(msg), "AuthIAM") {
		t.Errorf("GrantInvoke with JWT: %v", msg)
	}
}

// render writes a Fn::Join of strings and Refs as one string, Refs as ${id}.
func render(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		if ref, ok := v["Ref"]; ok {
			return "${" + ref.(string) + "}"
		}
		if j, ok := v["Fn::Join"].([]any); ok {
			var b strings.Builder
			for i, part := range j[1].([]any) {
				if i > 0 {
					b.WriteString(j[0].(string))
				}
				b.WriteString(render(part))
			}
			return b.String()
		}
	}
	return jsonOf(v)
}

// iamMatch is IAM's ARN wildcard match: * any run of characters, ? one.
func iamMatch(pattern, s string) bool {
	re := "^" + strings.NewReplacer(`\*`, ".*", `\?`, ".").Replace(regexp.QuoteMeta(pattern)) + "$"
	return regexp.MustCompile(re).MatchString(s)
}
