package idemtable_test

import (
	"os"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/exactonce/exactonce/infra/idemtable"
)

func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// TestTable: the table has the key the library writes, TTL on ttl,
// on-demand billing and PITR; Grant allows UpdateItem only.
func TestTable(t *testing.T) {
	defer func() {
		if r := recover(); r != nil { // CDK assertion failures are panics
			t.Fatal(r)
		}
	}()
	app := awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{"aws:cdk:bundling-stacks": []string{}}})
	stack := awscdk.NewStack(app, jsii.String("S"), nil)
	keys := idemtable.New(stack, "Keys", nil)
	idemtable.New(stack, "Claims", &idemtable.Props{PartitionKey: "eventId", Keep: true})
	role := awsiam.NewRole(stack, jsii.String("R"), &awsiam.RoleProps{AssumedBy: awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil)})
	idemtable.Grant(keys, role)

	tmpl := assertions.Template_FromStack(stack, nil)
	tmpl.HasResource(jsii.String("AWS::DynamoDB::Table"), map[string]any{
		"Properties": map[string]any{
			"KeySchema":                        []any{map[string]any{"AttributeName": "id", "KeyType": "HASH"}},
			"BillingMode":                      "PAY_PER_REQUEST",
			"TimeToLiveSpecification":          map[string]any{"AttributeName": "ttl", "Enabled": true},
			"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
			"DeletionProtectionEnabled":        false,
		},
		"DeletionPolicy": "Delete",
	})
	tmpl.HasResource(jsii.String("AWS::DynamoDB::Table"), map[string]any{
		"Properties": map[string]any{
			"KeySchema":                 []any{map[string]any{"AttributeName": "eventId", "KeyType": "HASH"}},
			"DeletionProtectionEnabled": true,
		},
		"DeletionPolicy": "Retain",
	})
	tmpl.HasResourceProperties(jsii.String("AWS::IAM::Policy"), map[string]any{
		"PolicyDocument": map[string]any{"Statement": []any{map[string]any{
			"Action": "dynamodb:UpdateItem", "Effect": "Allow",
			"Resource": assertions.Match_AnyValue(),
		}}},
	})
}
