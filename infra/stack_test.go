package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// synth builds the stack with placeholder function code (the real build is
// exercised by TestAssetHashesStable) and cdk-nag applied.
func synth(t *testing.T, s Settings) (awscdk.Stack, map[string]any) {
	t.Helper()
	code := t.TempDir()
	for _, f := range Functions {
		os.MkdirAll(filepath.Join(code, f), 0o755)
		os.WriteFile(filepath.Join(code, f, "bootstrap"), []byte("placeholder "+f), 0o755)
	}
	if s.Code == nil {
		s.Code = func(name string) string { return filepath.Join(code, name) }
	}
	if s.Auth == "" {
		s.Auth = "iam"
	}
	if s.EventSource == "" {
		s.EventSource = "exactonce"
	}
	var stack awscdk.Stack
	var tmpl map[string]any
	must(t, func() {
		app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
		stack = NewStack(app, "Test", nil, s)
		awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
		tmpl = *assertions.Template_FromStack(stack, nil).ToJSON()
	})
	return stack, tmpl
}

// must turns an assertion's panic (how jsii reports a failed CDK assertion)
// into a test failure.
func must(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%v", r)
		}
	}()
	f()
}

// resources returns the template's resources of one type, by logical id.
func resources(tmpl map[string]any, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range tmpl["Resources"].(map[string]any) {
		if res := r.(map[string]any); res["Type"] == typ {
			out[id] = res
		}
	}
	return out
}

func props(r map[string]any) map[string]any { p, _ := r["Properties"].(map[string]any); return p }

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestTable(t *testing.T) {
	_, tmpl := synth(t, Settings{})
	tables := resources(tmpl, "AWS::DynamoDB::Table")
	if len(tables) != 1 {
		t.Fatalf("%d tables", len(tables))
	}
	for _, tbl := range tables {
		p := props(tbl)
		for k, want := range map[string]string{
			"KeySchema":                        `[{"AttributeName":"actionId","KeyType":"HASH"}]`,
			"AttributeDefinitions":             `[{"AttributeName":"actionId","AttributeType":"S"},{"AttributeName":"expShard","AttributeType":"S"},{"AttributeName":"expiresAtMs","AttributeType":"N"}]`,
			"GlobalSecondaryIndexes":           `[{"IndexName":"byExpiry","KeySchema":[{"AttributeName":"expShard","KeyType":"HASH"},{"AttributeName":"expiresAtMs","KeyType":"RANGE"}],"Projection":{"ProjectionType":"KEYS_ONLY"}}]`,
			"BillingMode":                      `"PAY_PER_REQUEST"`,
			"TimeToLiveSpecification":          `{"AttributeName":"ttl","Enabled":true}`,
			"PointInTimeRecoverySpecification": `{"PointInTimeRecoveryEnabled":true}`,
			"StreamSpecification":              `{"StreamViewType":"NEW_AND_OLD_IMAGES"}`,
			"SSESpecification":                 `{"SSEEnabled":true}`,
			"DeletionProtectionEnabled":        `true`,
		} {
			if got := jsonOf(p[k]); got != want {
				t.Errorf("%s = %s, want %s", k, got, want)
			}
		}
		if tbl["DeletionPolicy"] != "Retain" || tbl["UpdateReplacePolicy"] != "Retain" {
			t.Errorf("table policies %v/%v, want Retain", tbl["DeletionPolicy"], tbl["UpdateReplacePolicy"])
		}
	}
	_, tmpl = synth(t, Settings{Throwaway: true})
	for _, tbl := range resources(tmpl, "AWS::DynamoDB::Table") {
		if props(tbl)["DeletionProtectionEnabled"] != false || tbl["DeletionPolicy"] != "Delete" {
			t.Errorf("throwaway table: protection %v, policy %v", props(tbl)["DeletionProtectionEnabled"], tbl["DeletionPolicy"])
		}
	}
}

func TestFunctions(t *testing.T) {
	_, tmpl := synth(t, Settings{ExampleSubscriber: true})
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
		_, tmpl := synth(t, Settings{Tracing: on, ExampleSubscriber: true})
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

func TestRoutesAuth(t *testing.T) {
	_, tmpl := synth(t, Settings{})
	routes := resources(tmpl, "AWS::ApiGatewayV2::Route")
	var keys []string
	for _, r := range routes {
		keys = append(keys, props(r)["RouteKey"].(string))
		if props(r)["AuthorizationType"] != "AWS_IAM" {
			t.Errorf("route %v: authorization %v", props(r)["RouteKey"], props(r)["AuthorizationType"])
		}
	}
	sort.Strings(keys)
	want := []string{"GET /actions/{actionId}", "GET /keys/{key}", "POST /actions", "POST /actions/{actionId}/cancel", "POST /actions/{actionId}/consume",
		"POST /keys/{key}/claim", "POST /keys/{key}/complete", "POST /keys/{key}/release"}
	if !slices.Equal(keys, want) {
		t.Fatalf("routes %v, want %v", keys, want)
	}
	for _, st := range resources(tmpl, "AWS::ApiGatewayV2::Stage") {
		p := props(st)
		if !strings.Contains(jsonOf(p["AccessLogSettings"]), `\"requestId\":\"$context.requestId\"`) {
			t.Errorf("access log format: %s", jsonOf(p["AccessLogSettings"]))
		}
		if jsonOf(p["DefaultRouteSettings"]) != `{"ThrottlingBurstLimit":2000,"ThrottlingRateLimit":1000}` {
			t.Errorf("throttling: %s", jsonOf(p["DefaultRouteSettings"]))
		}
	}

	_, tmpl = synth(t, Settings{Auth: "jwt", JwtIssuer: "https://issuer.example", JwtAudience: []string{"exactonce"}})
	for _, r := range resources(tmpl, "AWS::ApiGatewayV2::Route") {
		if props(r)["AuthorizationType"] != "JWT" {
			t.Errorf("jwt route %v: %v", props(r)["RouteKey"], props(r)["AuthorizationType"])
		}
	}
	auths := resources(tmpl, "AWS::ApiGatewayV2::Authorizer")
	if len(auths) != 1 || !strings.Contains(jsonOf(auths), `"Issuer":"https://issuer.example"`) || !strings.Contains(jsonOf(auths), `"Audience":["exactonce"]`) {
		t.Errorf("jwt authorizer: %s", jsonOf(auths))
	}
}

// TestLeastPrivilege checks every function's policy statements exactly.
func TestLeastPrivilege(t *testing.T) {
	_, tmpl := synth(t, Settings{})
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
	want := map[string][]string{
		"create":  {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on CreateLogs`, `Allow "dynamodb:UpdateItem" on Actions`, `Allow "secretsmanager:GetSecretValue" on ServerSecret`},
		"get":     {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on GetLogs`, `Allow "dynamodb:GetItem" on Actions`},
		"consume": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on ConsumeLogs`, `Allow "dynamodb:UpdateItem" on Actions`, `Allow "secretsmanager:GetSecretValue" on ServerSecret`},
		"cancel":  {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on CancelLogs`, `Allow "dynamodb:UpdateItem" on Actions`, `Allow "secretsmanager:GetSecretValue" on ServerSecret`},
		"publisher": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on PublisherLogs`, `Allow "events:PutEvents" on Bus`,
			`Allow ["sqs:SendMessage","sqs:GetQueueAttributes","sqs:GetQueueUrl"] on PublisherOnFailure`,
			`Allow "dynamodb:ListStreams" on *`,
			`Allow ["dynamodb:DescribeStream","dynamodb:GetRecords","dynamodb:GetShardIterator"] on Actions`},
		"sweeper": {`Allow ["logs:CreateLogStream","logs:PutLogEvents"] on SweeperLogs`, `Allow "dynamodb:Query" on Actions/index/byExpiry`,
			`Allow ["dynamodb:UpdateItem","dynamodb:GetItem","dynamodb:BatchGetItem"] on Actions`},
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

// resourceNames shortens a statement's resources to the logical ids they
// refer to (without the hash), or "*".
func resourceNames(v any) string {
	s := jsonOf(v)
	if s == `"*"` {
		return "*"
	}
	for _, name := range []string{"CreateLogs", "GetLogs", "ConsumeLogs", "CancelLogs", "KeyclaimLogs", "KeycompleteLogs", "KeyreleaseLogs", "KeygetLogs", "PublisherLogs", "SweeperLogs", "ServerSecret", "PublisherOnFailure", "Actions", "Bus"} {
		if strings.Contains(s, `"`+name) {
			if i := strings.Index(s, "/index/"); i >= 0 {
				return name + strings.TrimRight(s[i:], `"]}`)
			}
			return name
		}
	}
	return s
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestExampleSubscriber: off by default; with exactonce:exampleSubscriber the
// audit function gets a rule on the bus for the three event types, its own
// claims table with TTL, only the three item writes on it, and dead letters.
func TestExampleSubscriber(t *testing.T) {
	_, tmpl := synth(t, Settings{})
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

	_, tmpl = synth(t, Settings{ExampleSubscriber: true, EventSource: "shop.exactonce"})
	rules := auditRules(tmpl)
	if len(rules) != 1 {
		t.Fatalf("%d rules", len(rules))
	}
	for _, r := range rules {
		p := props(r)
		if got := jsonOf(p["EventPattern"]); got != `{"detail-type":["action.consumed","action.canceled","action.expired"],"source":["shop.exactonce"]}` {
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
	if !sameSet(ddb, []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}) {
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
	if metrics["AWS/Lambda/Errors"] != 11 || metrics["AWS/SQS/ApproximateNumberOfMessagesVisible"] != 2 {
		t.Errorf("alarms with the subscriber: %v", metrics)
	}
	if tmpl["Outputs"].(map[string]any)["AuditClaimsTableName"] == nil {
		t.Error("no AuditClaimsTableName output")
	}
}

// TestSweeper: a rule runs the sweeper every minute; it may only Query the
// expiry index and read (its watermarks, finished actions) or UpdateItem the table (TestLeastPrivilege), and every
// function that writes actions agrees on the shard count.
func TestSweeper(t *testing.T) {
	_, tmpl := synth(t, Settings{ExpiryShards: 32})
	var sweeperArn string
	envs := map[string]string{}
	for id, fn := range resources(tmpl, "AWS::Lambda::Function") {
		name := strings.TrimPrefix(props(fn)["Description"].(string), "ExactOnce ")
		envs[name] = jsonOf(props(fn)["Environment"])
		if name == "sweeper" {
			sweeperArn = id
			if props(fn)["Timeout"] != 60.0 {
				t.Errorf("sweeper timeout %v", props(fn)["Timeout"])
			}
		}
	}
	for _, name := range []string{"create", "consume", "cancel", "sweeper"} {
		if !strings.Contains(envs[name], `"EXACTONCE_EXPIRY_SHARDS":"32"`) || !strings.Contains(envs[name], `"TABLE_NAME"`) {
			t.Errorf("%s environment: %s", name, envs[name])
		}
	}
	var schedule map[string]any
	for id, r := range resources(tmpl, "AWS::Events::Rule") {
		if strings.HasPrefix(id, "SweepSchedule") {
			schedule = props(r)
		}
	}
	if schedule == nil || schedule["ScheduleExpression"] != "rate(1 minute)" || schedule["State"] != "ENABLED" ||
		!strings.Contains(jsonOf(schedule["Targets"]), sweeperArn) {
		t.Errorf("schedule: %s", jsonOf(schedule))
	}
	_, tmpl = synth(t, Settings{})
	if !strings.Contains(jsonOf(tmpl), `"EXACTONCE_EXPIRY_SHARDS":"16"`) {
		t.Error("default shard count not 16")
	}
}

func TestEventPlumbing(t *testing.T) {
	_, tmpl := synth(t, Settings{})
	esms := resources(tmpl, "AWS::Lambda::EventSourceMapping")
	if len(esms) != 1 {
		t.Fatalf("%d event source mappings", len(esms))
	}
	for _, esm := range esms {
		p := props(esm)
		for k, want := range map[string]string{
			"StartingPosition":           `"TRIM_HORIZON"`,
			"BatchSize":                  `100`,
			"BisectBatchOnFunctionError": `true`,
			"MaximumRetryAttempts":       `10`,
			"MaximumRecordAgeInSeconds":  `86400`,
			"FunctionResponseTypes":      `["ReportBatchItemFailures"]`,
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
	if !strings.Contains(pub, "EVENT_BUS_NAME") || !strings.Contains(pub, `"EVENT_SOURCE":"exactonce"`) {
		t.Errorf("publisher environment: %s", pub)
	}
}

func TestAlarmsAndOutputs(t *testing.T) {
	_, tmpl := synth(t, Settings{})
	alarms := resources(tmpl, "AWS::CloudWatch::Alarm")
	metrics := map[string]int{}
	for _, a := range alarms {
		metrics[fmt.Sprint(props(a)["Namespace"], "/", props(a)["MetricName"])]++
		if props(a)["AlarmActions"] != nil {
			t.Error("alarm actions without an alarm email")
		}
	}
	want := map[string]int{"AWS/Lambda/Errors": 10, "AWS/Lambda/IteratorAge": 1, "AWS/SQS/ApproximateNumberOfMessagesVisible": 1, "AWS/ApiGateway/5xx": 1}
	if fmt.Sprint(metrics) != fmt.Sprint(want) {
		t.Errorf("alarms on %v, want %v", metrics, want)
	}
	outs := tmpl["Outputs"].(map[string]any)
	for _, o := range []string{"ApiUrl", "TableName", "EventBusName", "EventBusArn", "OnFailureQueueUrl"} {
		if outs[o] == nil {
			t.Errorf("no output %s", o)
		}
	}

	_, tmpl = synth(t, Settings{AlarmEmail: "ops@example.com"})
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

// TestNag: cdk-nag's AwsSolutions pack reports no error (suppressions carry
// their reasons in stack.go).
func TestNag(t *testing.T) {
	for _, s := range []Settings{{}, {AlarmEmail: "ops@example.com", ExampleSubscriber: true}, {Auth: "jwt", JwtIssuer: "https://i.example", JwtAudience: []string{"a"}}, {Tracing: true, ExampleSubscriber: true}} {
		stack, _ := synth(t, s)
		must(t, func() {
			ann := assertions.Annotations_FromStack(stack)
			errs := ann.FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*")))
			for _, e := range *errs {
				t.Errorf("nag error at %s: %v", *e.Id, e.Entry.Data)
			}
		})
	}
}

// TestAssetHashesStable builds the real functions twice and synthesizes
// twice: the bytes, and so every asset hash, are the same.
func TestAssetHashesStable(t *testing.T) {
	root, _ := filepath.Abs("..")
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		if err := BuildFunctions(root, dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range Functions {
		x, _ := os.ReadFile(filepath.Join(a, f, "bootstrap"))
		y, _ := os.ReadFile(filepath.Join(b, f, "bootstrap"))
		if len(x) < 1<<20 || !bytes.Equal(x, y) {
			t.Fatalf("%s: builds differ or are too small (%d, %d bytes)", f, len(x), len(y))
		}
	}
	keys := func(dir string) string {
		_, tmpl := synth(t, Settings{Code: func(n string) string { return filepath.Join(dir, n) }})
		var out []string
		for _, fn := range resources(tmpl, "AWS::Lambda::Function") {
			out = append(out, jsonOf(props(fn)["Code"].(map[string]any)["S3Key"]))
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	if ka, kb := keys(a), keys(b); ka != kb {
		t.Fatalf("asset keys differ across synths:\n%s\n%s", ka, kb)
	}
}

// TestDashboard: one dashboard with outcomes per route, p50/p99 latency,
// API 4xx/5xx, the event pipeline and expiry.
func TestDashboard(t *testing.T) {
	_, tmpl := synth(t, Settings{})
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
