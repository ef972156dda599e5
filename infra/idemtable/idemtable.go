// Package idemtable is the CDK (Go) construct for a table of idempotency
// keys (package idempotency, idempotency/dynamostore, events/once):
// on-demand, string partition key, DynamoDB TTL on "ttl", point-in-time
// recovery, AWS-managed encryption. It lives apart from the library so the
// library never imports the CDK or jsii.
//
//	keys := idemtable.New(stack, "IdempotencyKeys", nil)
//	idemtable.Grant(keys, fn) // the one action the library needs
//	fn.AddEnvironment(jsii.String("IDEMPOTENCY_TABLE"), keys.TableName(), nil)
package idemtable

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/exactonce/exactonce/idempotency/dynamostore"
)

// Props tune the table; nil or zero values mean the defaults.
type Props struct {
	// PartitionKey is dynamostore.DefaultPartitionKey ("id") when empty;
	// events/once uses "eventId".
	PartitionKey string
	// Keep: deletion protection on and RemovalPolicy RETAIN (keys outlive a
	// stack deleted by mistake); false: destroyed with the stack.
	Keep bool
}

// New adds the table to scope.
func New(scope constructs.Construct, id string, p *Props) awsdynamodb.Table {
	if p == nil {
		p = &Props{}
	}
	pk := p.PartitionKey
	if pk == "" {
		pk = dynamostore.DefaultPartitionKey
	}
	removal := awscdk.RemovalPolicy_DESTROY
	if p.Keep {
		removal = awscdk.RemovalPolicy_RETAIN
	}
	return awsdynamodb.NewTable(scope, jsii.String(id), &awsdynamodb.TableProps{
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String(pk), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String(dynamostore.TTLAttribute),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:         awsdynamodb.TableEncryption_AWS_MANAGED,
		DeletionProtection: jsii.Bool(p.Keep),
		RemovalPolicy:      removal,
	})
}

// Grant lets grantee claim, complete and release keys: dynamodb:UpdateItem
// on the table, the only call the library makes (each transition is one
// conditional UpdateItem). Reads (dynamostore.Table.Get) need GetItem too.
func Grant(t awsdynamodb.ITable, grantee awsiam.IGrantable) awsiam.Grant {
	return t.Grant(grantee, jsii.String("dynamodb:UpdateItem"))
}
