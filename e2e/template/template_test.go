package template

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const tiny = `{"Resources":{
 "T":{"Type":"AWS::DynamoDB::Table","Properties":{"KeySchema":[{"AttributeName":"id","KeyType":"HASH"}]}},
 "R":{"Type":"AWS::IAM::Role","Properties":{}},
 "P":{"Type":"AWS::IAM::Policy","Properties":{"Roles":[{"Ref":"R"}],"PolicyDocument":{"Statement":[
   {"Effect":"Allow","Action":"dynamodb:GetItem","Resource":{"Fn::GetAtt":["T","Arn"]}},
   {"Effect":"Allow","Action":"dynamodb:Query","Resource":{"Fn::Join":["",[{"Fn::GetAtt":["T","Arn"]},"/index/byUser"]]}}]}}},
 "F":{"Type":"AWS::Lambda::Function","Metadata":{"aws:cdk:path":"S/E/Api/Get/Function/Resource"},
   "Properties":{"Role":{"Fn::GetAtt":["R","Arn"]},"Timeout":10,"Environment":{"Variables":{"TABLE_NAME":{"Ref":"T"},"X":{"Fn::Sub":"${T}-${AWS::Region}"}}}}},
 "I":{"Type":"AWS::ApiGatewayV2::Integration","Properties":{"IntegrationUri":{"Fn::GetAtt":["F","Arn"]},"PayloadFormatVersion":"2.0"}},
 "Rt":{"Type":"AWS::ApiGatewayV2::Route","Properties":{"RouteKey":"GET /x/{id}","AuthorizationType":"AWS_IAM","Target":{"Fn::Join":["",["integrations/",{"Ref":"I"}]]}}},
 "M":{"Type":"AWS::Lambda::EventSourceMapping","Properties":{"FunctionName":{"Ref":"F"},"EventSourceArn":{"Fn::GetAtt":["T","StreamArn"]},
   "BatchSize":7,"FunctionResponseTypes":["ReportBatchItemFailures"],"FilterCriteria":{"Filters":[{"Pattern":"{\"a\":[1]}"}]}}}
}}`

// TestModel reads a template's parts with every intrinsic resolved to the
// local stack's names.
func TestModel(t *testing.T) {
	tpl, err := Parse([]byte(tiny))
	if err != nil {
		t.Fatal(err)
	}
	n := LocalNames(tpl)
	if _, err := Model(tpl, n); err == nil || !strings.Contains(err.Error(), "T.StreamArn") {
		t.Fatalf("a StreamArn the stack has not set: %v", err)
	}
	n.Attrs["T"]["StreamArn"] = "arn:stream"
	s, err := Model(tpl, n)
	if err != nil {
		t.Fatal(err)
	}
	f := s.Functions["get"]
	if f == nil || f.Env["TABLE_NAME"] != "T" || f.Env["X"] != "T-"+DefaultRegion || f.Timeout != 10 || f.RoleArn != "arn:aws:iam::000000000000:role/R" {
		t.Fatalf("function %+v", f)
	}
	if len(f.Statements) != 2 || f.Statements[1].ID != "P[1]" || f.Statements[1].Doc["Resource"] != "arn:aws:dynamodb:us-east-1:000000000000:table/T/index/byUser" {
		t.Fatalf("statements %+v", f.Statements)
	}
	if len(s.Routes) != 1 || s.Routes[0].Function != "get" || s.Routes[0].RouteKey != "GET /x/{id}" || s.Routes[0].PayloadFormatVersion != "2.0" {
		t.Fatalf("routes %+v", s.Routes)
	}
	m := s.Mappings[0]
	if m.Function != "get" || m.EventSourceArn != "arn:stream" || m.BatchSize != 7 || !m.ReportBatchItemFailures ||
		m.MaximumRetryAttempts != -1 || m.OnFailure != "" || len(m.Filters) != 1 {
		t.Fatalf("mapping %+v", m)
	}
}

func TestResolveErrors(t *testing.T) {
	n := &Names{Refs: map[string]string{"A": "a"}, Attrs: map[string]map[string]string{}}
	for _, v := range []any{
		map[string]any{"Ref": "Missing"},
		map[string]any{"Fn::GetAtt": []any{"A", "Arn"}},
		map[string]any{"Fn::ImportValue": "x"},
	} {
		if _, err := n.Resolve(v); err == nil {
			t.Errorf("%v resolved", v)
		}
	}
	got, err := n.Resolve(map[string]any{"Fn::Select": []any{1.0, map[string]any{"Fn::Split": []any{"/", "x/y/z"}}}})
	if err != nil || got != "y" {
		t.Fatalf("select/split: %v %v", got, err)
	}
}

// A cloud assembly of two Regions' stacks: the first creates the global
// table and the secret with replicas in the second, whose stack reads its
// replica's stream ARN with an AwsCustomResource and names the secret.
const (
	firstRegion = `{"Resources":{
 "G":{"Type":"AWS::DynamoDB::GlobalTable","Properties":{"TableName":"tbl","KeySchema":[{"AttributeName":"id","KeyType":"HASH"}],
   "StreamSpecification":{"StreamViewType":"NEW_AND_OLD_IMAGES"},"Replicas":[{"Region":"us-east-2"},{"Region":"us-east-1"}]}},
 "S":{"Type":"AWS::SecretsManager::Secret","Properties":{"Name":"tbl/server","ReplicaRegions":[{"Region":"us-east-2"}]}},
 "Other":{"Type":"AWS::SecretsManager::Secret","Properties":{"Name":"first/only"}}}}`
	replicaRegion = `{"Resources":{
 "PR":{"Type":"AWS::IAM::Role","Properties":{"ManagedPolicyArns":[{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"]]}]}},
 "PP":{"Type":"AWS::IAM::Policy","Properties":{"Roles":[{"Ref":"PR"}],"PolicyDocument":{"Statement":[
   {"Effect":"Allow","Action":"dynamodb:DescribeTable","Resource":"arn:aws:dynamodb:us-east-2:000000000000:table/tbl"}]}}},
 "Prov":{"Type":"AWS::Lambda::Function","Metadata":{"aws:cdk:path":"S/AWS679f/Resource"},
   "Properties":{"Role":{"Fn::GetAtt":["PR","Arn"]},"Runtime":"nodejs24.x","Handler":"index.handler"}},
 "CR":{"Type":"Custom::AWS","Properties":{"ServiceToken":{"Fn::GetAtt":["Prov","Arn"]},
   "Create":"{\"service\":\"DynamoDB\",\"action\":\"describeTable\",\"parameters\":{\"TableName\":\"tbl\"},\"outputPaths\":[\"Table.LatestStreamArn\"],\"physicalResourceId\":{\"responsePath\":\"Table.LatestStreamArn\"}}"}},
 "R":{"Type":"AWS::IAM::Role","Properties":{}},
 "P":{"Type":"AWS::IAM::Policy","Properties":{"Roles":[{"Ref":"R"}],"PolicyDocument":{"Statement":[
   {"Effect":"Allow","Action":"dynamodb:GetItem","Resource":{"Fn::Sub":"arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/tbl"}}]}}},
 "F":{"Type":"AWS::Lambda::Function","Metadata":{"aws:cdk:path":"S/E/Events/Publisher/Function/Resource"},
   "Properties":{"Role":{"Fn::GetAtt":["R","Arn"]},"Environment":{"Variables":{"TABLE_NAME":"tbl","EXACTONCE_SECRET_ARN":"tbl/server"}}}},
 "M":{"Type":"AWS::Lambda::EventSourceMapping","Properties":{"FunctionName":{"Ref":"F"},"EventSourceArn":{"Fn::GetAtt":["CR","Table.LatestStreamArn"]}}},
 "Purge":{"Type":"AWS::Events::Rule","Properties":{"ScheduleExpression":"rate(1 day)","Targets":[{"Arn":{"Fn::GetAtt":["F","Arn"]},"Id":"T","Input":"{\"purge\":true}"}]}}
}}`
	assemblyManifest = `{"artifacts":{
 "S-us-east-1":{"type":"aws:cloudformation:stack","environment":"aws://%s/us-east-1","properties":{"templateFile":"S-us-east-1.template.json"}},
 "S-us-east-2":{"type":"aws:cloudformation:stack","environment":"aws://%s/us-east-2","properties":{"templateFile":"S-us-east-2.template.json"},
   "dependencies":["S-us-east-1","S-us-east-2.assets"]}}}`
)

func writeAssembly(t *testing.T, account, replica string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"S-us-east-1.template.json": firstRegion, "S-us-east-2.template.json": replica,
		"manifest.json": fmt.Sprintf(assemblyManifest, account, account)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "S-us-east-2.template.json")
}

// TestReplicaRegion reads a replica Region's stack as it deploys: in its
// own Region, after the first Region's stack, whose global table and secret
// have replicas there; its custom resource's call and provider known, its
// stream ARN only once the call answered.
func TestReplicaRegion(t *testing.T) {
	tpl, err := Load(writeAssembly(t, Account, replicaRegion))
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Region != "us-east-2" || tpl.Stack != "S-us-east-2" || len(tpl.Dependencies) != 1 || tpl.Dependencies[0].Region != "us-east-1" {
		t.Fatalf("region %q stack %q dependencies %d", tpl.Region, tpl.Stack, len(tpl.Dependencies))
	}
	tables, secrets, err := Replicated(tpl)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || tables[0].Name != "tbl" || tables[0].TTLAttribute() != "" {
		t.Fatalf("tables %+v", tables)
	}
	if len(secrets) != 1 || secrets[0] != "arn:aws:secretsmanager:us-east-2:000000000000:secret:tbl/server-e2e000" {
		t.Fatalf("secrets %v", secrets)
	}
	n := LocalNames(tpl)
	crs, err := CustomResources(tpl, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(crs) != 1 || crs[0].Provider != "Prov" || crs[0].Create.Action != "describeTable" || crs[0].Create.Parameters["TableName"] != "tbl" ||
		crs[0].Create.ResponsePath != "Table.LatestStreamArn" || len(crs[0].Create.OutputPaths) != 1 {
		t.Fatalf("custom resources %+v", crs)
	}
	if _, err := Model(tpl, n); err == nil || !strings.Contains(err.Error(), "CR.Table.LatestStreamArn") {
		t.Fatalf("the custom resource's answer is not known yet: %v", err)
	}
	n.Attrs["CR"]["Table.LatestStreamArn"] = "arn:stream"
	s, err := Model(tpl, n)
	if err != nil {
		t.Fatal(err)
	}
	if s.Region != "us-east-2" || len(s.Functions) != 1 || s.Functions["publisher"] == nil || s.Providers["Prov"] == nil || len(s.Providers["Prov"].Statements) != 1 {
		t.Fatalf("stack %+v", s)
	}
	if got := s.Functions["publisher"].Statements[0].Doc["Resource"]; got != "arn:aws:dynamodb:us-east-2:000000000000:table/tbl" {
		t.Fatalf("a statement of the replica Region: %v", got)
	}
	if s.Mappings[0].EventSourceArn != "arn:stream" || s.Rules[0].Inputs["publisher"] != `{"purge":true}` {
		t.Fatalf("mapping %+v rule %+v", s.Mappings[0], s.Rules[0])
	}
}

// TestReplicaRegionRefused: what the local stack cannot model fails, named.
func TestReplicaRegionRefused(t *testing.T) {
	if _, err := Load(writeAssembly(t, "123456789012", replicaRegion)); err == nil || !strings.Contains(err.Error(), "account 123456789012") {
		t.Errorf("another account: %v", err)
	}
	for name, c := range map[string]struct{ from, to, want string }{
		"another custom resource type": {`"Custom::AWS"`, `"Custom::Other"`, "Custom::Other: the local stack models only"},
		"errors ignored":               {`\"service\":`, `\"ignoreErrorCodesMatching\":\"x\",\"service\":`, `unknown field "ignoreErrorCodesMatching"`},
		"another Region":               {`\"service\":`, `\"region\":\"us-west-2\",\"service\":`, "Region us-west-2"},
		"another managed policy":       {"AWSLambdaBasicExecutionRole", "AdministratorAccess", "managed policies"},
	} {
		tpl, err := Load(writeAssembly(t, Account, strings.Replace(replicaRegion, c.from, c.to, 1)))
		if err != nil {
			t.Fatal(err)
		}
		n := LocalNames(tpl)
		n.Attrs["CR"]["Table.LatestStreamArn"] = "arn:stream"
		if _, err := Model(tpl, n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
