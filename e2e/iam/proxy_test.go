package iam

import (
	"encoding/json"
	"testing"
)

// TestChecks maps calls to the action, resource and dynamodb:LeadingKeys
// IAM authorizes them by.
func TestChecks(t *testing.T) {
	p := &Proxy{Region: "us-east-1", Account: "000000000000", PartitionKeys: map[string]string{"T": "id", "T/byUser": "userKey"},
		Secrets: []string{"arn:aws:secretsmanager:us-east-1:000000000000:secret:tbl/server-e2e000"}}
	for _, c := range []struct {
		service, op, body string
		action, resource  string
		leading           []string
	}{
		{DynamoDB, "UpdateItem", `{"TableName":"T","Key":{"id":{"S":"key#a"}}}`, "dynamodb:UpdateItem", "arn:aws:dynamodb:us-east-1:000000000000:table/T", []string{"key#a"}},
		{DynamoDB, "Query", `{"TableName":"T","IndexName":"byUser","KeyConditionExpression":"#u = :u AND createdAtMs > :c","ExpressionAttributeNames":{"#u":"userKey"},"ExpressionAttributeValues":{":u":{"S":"t#u1"},":c":{"N":"1"}}}`,
			"dynamodb:Query", "arn:aws:dynamodb:us-east-1:000000000000:table/T/index/byUser", []string{"t#u1"}},
		{DynamoDB, "BatchGetItem", `{"RequestItems":{"T":{"Keys":[{"id":{"S":"a"}},{"id":{"S":"b"}}]}}}`, "dynamodb:BatchGetItem", "arn:aws:dynamodb:us-east-1:000000000000:table/T", []string{"a", "b"}},
		{SQS, "SendMessage", `{"QueueUrl":"https://sqs.us-east-1.amazonaws.com/000000000000/Q","MessageBody":"x"}`, "sqs:SendMessage", "arn:aws:sqs:us-east-1:000000000000:Q", nil},
		// A secret by name is authorized on its ARN, as Secrets Manager does
		// (a replica Region's functions name their replica); a name no
		// secret has, on the ARN the name would have without its suffix.
		{SecretsManager, "GetSecretValue", `{"SecretId":"tbl/server"}`, "secretsmanager:GetSecretValue", "arn:aws:secretsmanager:us-east-1:000000000000:secret:tbl/server-e2e000", nil},
		{SecretsManager, "GetSecretValue", `{"SecretId":"tbl/other"}`, "secretsmanager:GetSecretValue", "arn:aws:secretsmanager:us-east-1:000000000000:secret:tbl/other", nil},
		{Events, "PutEvents", `{"Entries":[{"EventBusName":"B","Source":"s","DetailType":"d","Detail":"{}"}]}`, "events:PutEvents", "arn:aws:events:us-east-1:000000000000:event-bus/B", nil},
	} {
		got, err := p.checks(c.service, c.op, []byte(c.body))
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: %v %+v", c.op, err, got)
		}
		g := got[0]
		if g.action != c.action || g.resource != c.resource {
			t.Errorf("%s: %s on %s", c.op, g.action, g.resource)
		}
		if c.leading != nil {
			b, _ := json.Marshal(g.context["dynamodb:LeadingKeys"])
			w, _ := json.Marshal(c.leading)
			if string(b) != string(w) {
				t.Errorf("%s: LeadingKeys %s, want %s", c.op, b, w)
			}
		}
	}
	if _, err := p.checks(Streams, "GetRecords", []byte(`{"ShardIterator":"never-seen"}`)); err == nil {
		t.Error("GetRecords with an unknown iterator was authorizable")
	}
	p.learnIterators("GetShardIterator", []byte(`{"StreamArn":"arn:s"}`), []byte(`{"ShardIterator":"i1"}`))
	p.learnIterators("GetRecords", []byte(`{"ShardIterator":"i1"}`), []byte(`{"NextShardIterator":"i2"}`))
	got, err := p.checks(Streams, "GetRecords", []byte(`{"ShardIterator":"i2"}`))
	if err != nil || got[0].resource != "arn:s" {
		t.Fatalf("GetRecords on the next iterator: %v %+v", err, got)
	}
}
