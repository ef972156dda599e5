package template

import (
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
	if f == nil || f.Env["TABLE_NAME"] != "T" || f.Env["X"] != "T-"+Region || f.Timeout != 10 || f.RoleArn != "arn:aws:iam::000000000000:role/R" {
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
