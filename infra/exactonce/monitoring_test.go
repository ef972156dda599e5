package exactonce

import (
	"fmt"
	"strings"
	"testing"

	"github.com/exactonce/exactonce/shared/publish"
	"github.com/exactonce/exactonce/shared/telemetry"
)

func TestAlarmsAndOutputs(t *testing.T) {
	_, tmpl := synth(t, Props{})
	alarms := resources(tmpl, "AWS::CloudWatch::Alarm")
	metrics := map[string]int{}
	for _, a := range alarms {
		metrics[fmt.Sprint(props(a)["Namespace"], "/", props(a)["MetricName"])]++
		if props(a)["AlarmActions"] != nil {
			t.Error("alarm actions without an alarm email")
		}
	}
	want := map[string]int{"AWS/Lambda/Errors": 14, "AWS/Lambda/IteratorAge": 1, "AWS/SQS/ApproximateNumberOfMessagesVisible": 1, "AWS/ApiGateway/5xx": 1,
		"ExactOnce/EntriesFailed": 1}
	if fmt.Sprint(metrics) != fmt.Sprint(want) {
		t.Errorf("alarms on %v, want %v", metrics, want)
	}
	outs := tmpl["Outputs"].(map[string]any)
	for _, o := range []string{"ApiUrl", "TableName", "EventBusName", "EventBusArn", "OnFailureQueueUrl", "RepublishFunctionName"} {
		if outs[o] == nil {
			t.Errorf("no output %s", o)
		}
	}

	_, tmpl = synth(t, Props{AlarmEmail: "ops@example.com"})
	subs := jsonOf(resources(tmpl, "AWS::SNS::Subscription"))
	if !strings.Contains(subs, `"Endpoint":"ops@example.com"`) {
		t.Errorf("email subscription: %s", subs)
	}
	for id, a := range resources(tmpl, "AWS::CloudWatch::Alarm") {
		if props(a)["AlarmActions"] == nil {
			t.Errorf("alarm %s has no action", id)
		}
	}
}

// TestDashboard: one dashboard with outcomes per route, p50/p99 latency,
// API 4xx/5xx, the event pipeline and expiry.
func TestDashboard(t *testing.T) {
	_, tmpl := synth(t, Props{})
	boards := resources(tmpl, "AWS::CloudWatch::Dashboard")
	if len(boards) != 1 {
		t.Fatalf("%d dashboards", len(boards))
	}
	for _, b := range boards {
		body := jsonOf(props(b)["DashboardBody"])
		for _, want := range []string{
			`SEARCH('{ExactOnce,Route,Outcome} MetricName=\\\"Requests\\\"', 'Sum', 60)`,
			`SEARCH('{ExactOnce,Route} MetricName=\\\"Latency\\\"', 'p50', 60)`,
			`SEARCH('{ExactOnce,Route} MetricName=\\\"Latency\\\"', 'p99', 60)`,
			`\"AWS/ApiGateway\",\"4xx\"`, `\"AWS/ApiGateway\",\"5xx\"`,
			`\"ExactOnce\",\"EventsPublished\",\"Function\",\"publisher\"`, `\"EntriesRetried\"`, `\"BatchItemFailures\"`,
			`\"AWS/Lambda\",\"IteratorAge\"`, `\"ApproximateNumberOfMessagesVisible\"`,
			`\"ExactOnce\",\"ExpiryLag\",\"Function\",\"sweeper\"`, `\"ActionsExpired\"`, `\"SweepDuration\"`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("dashboard lacks %s", want)
			}
		}
	}
}

// TestEventAlarms (issue 14): each event-pipeline alarm watches the metric
// the code emits or AWS publishes, by the same constants: namespace, name,
// dimensions, statistic and threshold.
func TestEventAlarms(t *testing.T) {
	_, tmpl := synth(t, Props{})
	byPrefix := map[string]map[string]any{}
	for id, a := range resources(tmpl, "AWS::CloudWatch::Alarm") {
		for _, p := range []string{"PublishFailuresAlarm", "StreamIteratorAgeAlarm", "OnFailureQueueAlarm", "PublisherErrorsAlarm"} {
			if strings.HasPrefix(id, p) {
				byPrefix[p] = props(a)
			}
		}
	}
	for name, want := range map[string]string{
		// what publish.Publisher emits (TestOutageIsAFunctionError checks the EMF side)
		"PublishFailuresAlarm":   fmt.Sprintf(`%s|%s|[{"Name":"%s","Value":"%s"}]|Sum|1`, telemetry.Namespace, publish.MetricEntriesFailed, publish.DimFunction, publish.FunctionName),
		"StreamIteratorAgeAlarm": `AWS/Lambda|IteratorAge|[{"Name":"FunctionName","Value":{"Ref":"PublisherFunction`,
		"OnFailureQueueAlarm":    `AWS/SQS|ApproximateNumberOfMessagesVisible|[{"Name":"QueueName","Value":{"Fn::GetAtt":["PublisherOnFailure`,
		"PublisherErrorsAlarm":   `AWS/Lambda|Errors|[{"Name":"FunctionName","Value":{"Ref":"PublisherFunction`,
	} {
		p := byPrefix[name]
		if p == nil {
			t.Errorf("no %s", name)
			continue
		}
		got := fmt.Sprintf("%v|%v|%s|%v|%v", p["Namespace"], p["MetricName"], jsonOf(p["Dimensions"]), p["Statistic"], p["Threshold"])
		if !strings.HasPrefix(got, want) {
			t.Errorf("%s watches %s, want %s", name, got, want)
		}
	}
	if th := byPrefix["StreamIteratorAgeAlarm"]["Threshold"]; th != 180000.0 {
		t.Errorf("iterator age threshold %v ms, want 3 minutes", th)
	}
}

// TestApiIdOutput: the stack outputs the API's id (a Ref of the HTTP API),
// from which a caller's IAM policy names the API's ARN
// (arn:aws:execute-api:REGION:ACCOUNT:API_ID/…), standalone and embedded.
func TestApiIdOutput(t *testing.T) {
	for name, stackIds := range map[string]bool{"standalone": true, "embedded": false} {
		_, tmpl := synthStack(t, "Test", Props{StackLogicalIds: stackIds})
		apis := resources(tmpl, "AWS::ApiGatewayV2::Api")
		if len(apis) != 1 {
			t.Fatalf("%s: %d HTTP APIs", name, len(apis))
		}
		var api string
		for id := range apis {
			api = id
		}
		out, _ := tmpl["Outputs"].(map[string]any)["ApiId"].(map[string]any)
		if got, want := jsonOf(out["Value"]), jsonOf(map[string]any{"Ref": api}); got != want {
			t.Errorf("%s: output ApiId is %s, want %s", name, got, want)
		}
	}
}
