package exactonce

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestFunctions(t *testing.T) {
	_, tmpl := synth(t, Props{ExampleSubscriber: true})
	fns := resources(tmpl, "AWS::Lambda::Function")
	var names []string
	for _, fn := range fns {
		names = append(names, strings.TrimPrefix(props(fn)["Description"].(string), "ExactOnce "))
	}
	if !sameSet(names, Functions) {
		t.Fatalf("functions %v, want %v", names, Functions)
	}
	for id, fn := range fns {
		p := props(fn)
		if p["Runtime"] != "provided.al2023" || jsonOf(p["Architectures"]) != `["arm64"]` || p["Handler"] != "bootstrap" {
			t.Errorf("%s: runtime %v arch %v handler %v", id, p["Runtime"], p["Architectures"], p["Handler"])
		}
		if jsonOf(p["LoggingConfig"]) == "null" || !strings.Contains(jsonOf(p["LoggingConfig"]), `"LogFormat":"JSON"`) {
			t.Errorf("%s: logging %s", id, jsonOf(p["LoggingConfig"]))
		}
		if p["MemorySize"] == nil || p["Timeout"] == nil {
			t.Errorf("%s: memory/timeout unset", id)
		}
	}
	for _, lg := range resources(tmpl, "AWS::Logs::LogGroup") {
		if props(lg)["RetentionInDays"] != 30.0 {
			t.Errorf("log group retention %v", props(lg)["RetentionInDays"])
		}
	}
}

// Tracing is off by default (it costs cold-start time); the context flag
// turns on active tracing for every function, with the X-Ray permissions.
func TestTracing(t *testing.T) {
	for _, on := range []bool{false, true} {
		_, tmpl := synth(t, Props{Tracing: on, ExampleSubscriber: true})
		for id, fn := range resources(tmpl, "AWS::Lambda::Function") {
			mode := jsonOf(props(fn)["TracingConfig"])
			if on && mode != `{"Mode":"Active"}` || !on && mode != "null" && mode != `{"Mode":"PassThrough"}` {
				t.Errorf("tracing=%v: %s has TracingConfig %s", on, id, mode)
			}
		}
		policies := jsonOf(resources(tmpl, "AWS::IAM::Policy"))
		if has := strings.Contains(policies, "xray:PutTraceSegments"); has != on {
			t.Errorf("tracing=%v: X-Ray permissions granted = %v", on, has)
		}
	}
}

// TestReservedConcurrency (issue 14, seen 4): API traffic cannot starve the
// publisher or the sweeper; the API functions keep the shared pool.
func TestReservedConcurrency(t *testing.T) {
	_, tmpl := synth(t, Props{})
	got := map[string]any{}
	for _, fn := range resources(tmpl, "AWS::Lambda::Function") {
		got[strings.TrimPrefix(props(fn)["Description"].(string), "ExactOnce ")] = props(fn)["ReservedConcurrentExecutions"]
	}
	for name, want := range map[string]any{"publisher": 20.0, "sweeper": 2.0, "consume": nil, "create": nil} {
		if got[name] != want {
			t.Errorf("%s reserved concurrency %v, want %v", name, got[name], want)
		}
	}
}

// TestLeastPrivilege checks every function's policy statements exactly.
func TestLeastPrivilege(t *testing.T) {
	_, tmpl := synth(t, Props{})
	// role logical id → the function it belongs to
	roleOf := map[string]string{}
	for _, fn := range resources(tmpl, "AWS::Lambda::Function") {
		role := props(fn)["Role"].(map[string]any)["Fn::GetAtt"].([]any)[0].(string)
		desc := props(fn)["Description"].(string)
		roleOf[role] = strings.TrimPrefix(desc, "ExactOnce ")
	}
	got := map[string][]string{}
	for _, pol := range resources(tmpl, "AWS::IAM::Policy") {
		p := props(pol)
		for _, r := range p["Roles"].([]any) {
			role := r.(map[string]any)["Ref"].(string)
			for _, st := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
				s := st.(map[string]any)
				line := fmt.Sprintf("%v %s on %s", s["Effect"], jsonOf(s["Action"]), resourceNames(s["Resource"]))
				if s["Condition"] != nil {
					line += " if " + jsonOf(s["Condition"])
				}
				got[roleOf[role]] = append(got[roleOf[role]], line)
			}
		}
	}
	// Actions in a statement are sorted: cdk.json's @aws-cdk/aws-iam:minimizePolicies.
	want := map[string][]string{
		"create": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on CreateLogs`, `Allow ["dynamodb:BatchGetItem","dynamodb:UpdateItem"] on Actions`,
			`Allow "dynamodb:Query" on Actions/index/byUser`, `Allow "secretsmanager:GetSecretValue" on ServerSecret`},
		// The list function may Query the user index and read items, nothing else.
		"userlist": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on UserlistLogs`, `Allow "dynamodb:BatchGetItem" on Actions`,
			`Allow "dynamodb:Query" on Actions/index/byUser`},
		"usercancel": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on UsercancelLogs`, `Allow ["dynamodb:BatchGetItem","dynamodb:UpdateItem"] on Actions`,
			`Allow "dynamodb:Query" on Actions/index/byUser`, `Allow "secretsmanager:GetSecretValue" on ServerSecret`},
		"get":     {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on GetLogs`, `Allow "dynamodb:GetItem" on Actions`},
		"uselist": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on UselistLogs`, `Allow "dynamodb:GetItem" on Actions`},
		"userelease": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on UsereleaseLogs`, `Allow "dynamodb:UpdateItem" on Actions`,
			`Allow "secretsmanager:GetSecretValue" on ServerSecret`},
		"consume": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on ConsumeLogs`, `Allow "dynamodb:UpdateItem" on Actions`, `Allow "secretsmanager:GetSecretValue" on ServerSecret`},
		"cancel":  {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on CancelLogs`, `Allow "dynamodb:UpdateItem" on Actions`, `Allow "secretsmanager:GetSecretValue" on ServerSecret`},
		"publisher": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on PublisherLogs`, `Allow "events:PutEvents" on Bus`,
			`Allow ["sqs:GetQueueAttributes","sqs:GetQueueUrl","sqs:SendMessage"] on PublisherOnFailure`,
			`Allow "dynamodb:ListStreams" on *`,
			`Allow ["dynamodb:DescribeStream","dynamodb:GetRecords","dynamodb:GetShardIterator"] on Actions`},
		"sweeper": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on SweeperLogs`, `Allow "dynamodb:Query" on Actions/index/byExpiry`,
			`Allow ["dynamodb:BatchGetItem","dynamodb:GetItem","dynamodb:UpdateItem"] on Actions`},
		"republish": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on RepublishLogs`, `Allow "dynamodb:Scan" on Actions`, `Allow "events:PutEvents" on Bus`},
	}
	// The /keys functions reach only idempotency-key items, never an action.
	keysOnly := ` if {"ForAllValues:StringLike":{"dynamodb:LeadingKeys":["key#*"]}}`
	for fn, op := range map[string]string{"keyclaim": "UpdateItem", "keycomplete": "UpdateItem", "keyrelease": "UpdateItem", "keyget": "GetItem"} {
		want[fn] = []string{`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on ` + title(fn) + `Logs`, `Allow "dynamodb:` + op + `" on Actions` + keysOnly,
			`Allow "secretsmanager:GetSecretValue" on ServerSecret`}
	}
	for fn, w := range want {
		g := got[fn]
		sort.Strings(g)
		sort.Strings(w)
		if !slices.Equal(g, w) {
			t.Errorf("%s policy:\n got %q\nwant %q", fn, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("policies for %d roles, want %d: %v", len(got), len(want), got)
	}
	// No managed policies (e.g. AWSLambdaBasicExecutionRole's logs:* on *).
	for id, r := range resources(tmpl, "AWS::IAM::Role") {
		if props(r)["ManagedPolicyArns"] != nil {
			t.Errorf("role %s has managed policies %v", id, props(r)["ManagedPolicyArns"])
		}
	}
}
