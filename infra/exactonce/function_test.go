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

// TestReservedConcurrency (issue 14, seen 4; issue 33): reserved
// concurrency is an option. Off by default, so a deploy needs no more than
// an account's default quota; with N, API traffic cannot starve the
// publisher (N) or the sweeper (2), and the API functions keep the shared
// pool.
func TestReservedConcurrency(t *testing.T) {
	for n, want := range map[int]map[string]any{
		0:  {"publisher": nil, "sweeper": nil, "consume": nil, "create": nil},
		20: {"publisher": 20.0, "sweeper": 2.0, "consume": nil, "create": nil},
		7:  {"publisher": 7.0, "sweeper": 2.0, "consume": nil, "create": nil},
	} {
		_, tmpl := synth(t, Props{ReservedConcurrency: n})
		got := map[string]any{}
		for _, fn := range resources(tmpl, "AWS::Lambda::Function") {
			got[strings.TrimPrefix(props(fn)["Description"].(string), "ExactOnce ")] = props(fn)["ReservedConcurrentExecutions"]
		}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("ReservedConcurrency %d: %s reserved concurrency %v, want %v", n, name, got[name], w)
			}
		}
	}
	if err := (&Props{Code: AssetCode("x"), ReservedConcurrency: -1}).Validate(); err == nil {
		t.Error("a negative ReservedConcurrency was accepted")
	}
}

// TestTenantMapOutOfTheEnvironment (issue 33): Lambda refuses more than 4 KB
// of environment variables, which the whole tenant map in every API
// function's environment passed at about 35 tenants. The map is in an SSM
// parameter the functions may read (and only that); a 100-tenant map
// synthesizes with every function's environment under 4 KB; a map the
// parameter cannot hold is refused at synth, naming the limit.
func TestTenantMapOutOfTheEnvironment(t *testing.T) {
	tenants := map[string][]string{}
	for i := range 100 {
		tenants[fmt.Sprintf("tenant-%03d", i)] = []string{fmt.Sprintf("arn:aws:iam::%012d:role/tenant-%03d-*", 100000000000+i*7919, i)}
	}
	_, tmpl := synth(t, Props{Tenants: tenants})
	params := resources(tmpl, "AWS::SSM::Parameter")
	if len(params) != 1 {
		t.Fatalf("%d SSM parameters, want the tenant map's", len(params))
	}
	for _, p := range params {
		if v, _ := props(p)["Value"].(string); !strings.Contains(v, "tenant-099") || props(p)["Tier"] != "Intelligent-Tiering" {
			t.Fatalf("parameter %v", jsonOf(props(p)))
		}
	}
	for _, fn := range resources(tmpl, "AWS::Lambda::Function") {
		vars, _ := props(fn)["Environment"].(map[string]any)["Variables"].(map[string]any)
		n := 0
		for k, v := range vars {
			n += len(k)
			if s, ok := v.(string); ok {
				n += len(s)
			} else {
				n += envTokenBytes // known at deploy: a name, URL or ARN
			}
		}
		name := props(fn)["Description"]
		if n > MaxEnvBytes {
			t.Errorf("%s: environment of about %d bytes, over Lambda's %d", name, n, MaxEnvBytes)
		}
		if _, ok := vars["EXACTONCE_TENANTS"]; ok {
			t.Errorf("%s: the tenant map is still in the environment", name)
		}
	}
	policies := jsonOf(resources(tmpl, "AWS::IAM::Policy"))
	if got := strings.Count(policies, "ssm:GetParameter"); got != len(Routes) {
		t.Errorf("%d statements allow ssm:GetParameter, want one per API function (%d)", got, len(Routes))
	}
	for i := 100; len(jsonOf(tenants)) <= MaxTenantsBytes; i++ {
		tenants[fmt.Sprintf("tenant-%03d", i)] = []string{fmt.Sprintf("arn:aws:iam::%012d:role/tenant-%03d-*", 100000000000+i*7919, i)}
	}
	err := (&Props{Code: AssetCode("x"), Tenants: tenants}).Validate()
	if err == nil || !strings.Contains(err.Error(), "8192") {
		t.Errorf("a %d-tenant map (%d bytes): %v, want a refusal naming the parameter's 8192 bytes", len(tenants), len(jsonOf(tenants)), err)
	}
}

// TestSweeperEventAge (issue 33): the sweeper's schedules invoke it
// asynchronously; an event that waited for a concurrency slot is dropped
// after two minutes (Lambda's default keeps it six hours) and never retried
// (the next run is the retry).
func TestSweeperEventAge(t *testing.T) {
	_, tmpl := synth(t, Props{})
	cfgs := resources(tmpl, "AWS::Lambda::EventInvokeConfig")
	found := false
	for _, c := range cfgs {
		if strings.Contains(jsonOf(props(c)["FunctionName"]), "Sweeper") {
			found = true
			if props(c)["MaximumEventAgeInSeconds"] != 120.0 || props(c)["MaximumRetryAttempts"] != 0.0 {
				t.Errorf("sweeper's async config %s", jsonOf(props(c)))
			}
		}
	}
	if !found {
		t.Errorf("no EventInvokeConfig for the sweeper: %s", jsonOf(cfgs))
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
