package awsfake

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/exactonce/exactonce/shared/awsconfig"
)

// TestThroughTheSDK: the real SDK clients accept the fake's answers (the
// SQS client checks the body's MD5) and see its errors.
func TestThroughTheSDK(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	cfg := awsconfig.Local(s.URL)
	q := sqs.NewFromConfig(cfg)
	s.AddQueue("dlq")
	url := "https://sqs.us-east-1.amazonaws.com/000000000000/dlq"
	if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	if got := s.Messages("dlq"); len(got) != 1 || got[0] != `{"a":1}` {
		t.Fatalf("messages %q", got)
	}
	if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url + "-other"), MessageBody: aws.String("x")}); err == nil {
		t.Fatal("a message to an unknown queue was accepted")
	}
	sm := secretsmanager.NewFromConfig(cfg)
	arn := "arn:aws:secretsmanager:us-east-1:000000000000:secret:s-e2e000"
	s.PutSecret(arn, "v1")
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil || aws.ToString(out.SecretString) != "v1" {
		t.Fatalf("secret %v %v", out, err)
	}
	if _, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn + "x")}); err == nil {
		t.Fatal("an unknown secret was found")
	}
	// By name, as a replica Region's functions name their replica: the
	// name is the ARN's resource less the hyphen and six characters.
	s.PutSecret("arn:aws:secretsmanager:us-east-2:000000000000:secret:tbl/server-e2e000", "v2")
	out, err = sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("tbl/server")})
	if err != nil || aws.ToString(out.SecretString) != "v2" || aws.ToString(out.Name) != "tbl/server" ||
		aws.ToString(out.ARN) != "arn:aws:secretsmanager:us-east-2:000000000000:secret:tbl/server-e2e000" {
		t.Fatalf("secret by name %+v %v", out, err)
	}
	for _, id := range []string{"tbl/server-e2e000", "tbl", "tbl/serve", "s-e2e0"} {
		if _, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)}); err == nil {
			t.Errorf("secret %q found", id)
		}
	}
}
