package exactonce

import (
	"fmt"
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/customresources"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/exactonce/exactonce/shared/store"
)

// Table is the actions table and its expiry index.
type Table struct {
	constructs.Construct
	// Table holds actions and idempotency keys (store), on demand, with a
	// NEW_AND_OLD_IMAGES stream for the publisher and TTL on "ttl". Nil with
	// Props.MultiRegion (see Global and Ref).
	Table awsdynamodb.Table
	// Global is the MRSC global table (Props.MultiRegion), in the stack of
	// its first Region only; nil otherwise.
	Global awsdynamodb.TableV2
	// Ref is the table this Region's functions use: Table in a single
	// Region; with Props.MultiRegion the replica in the stack's Region (its
	// ARN, and its own stream).
	Ref awsdynamodb.ITable
	// ExpiryIndexArn is the ARN of the sparse expiry index (store.ExpiryIndex).
	ExpiryIndexArn *string
}

// Keys-only and written by the create alone: finishing an action leaves
// its entry (no index write); the sweeper reads each due entry once,
// behind per-shard watermarks, and skips the finished ones.
var expiryIndex = struct{ pk, sk *awsdynamodb.Attribute }{
	&awsdynamodb.Attribute{Name: jsii.String("expShard"), Type: awsdynamodb.AttributeType_STRING},
	&awsdynamodb.Attribute{Name: jsii.String("expiresAtMs"), Type: awsdynamodb.AttributeType_NUMBER},
}

// Sparse and keys-only: a user's actions by creation time, written by the
// create alone (consume, cancel and expiry never touch its keys).
var userIndex = struct{ pk, sk *awsdynamodb.Attribute }{
	&awsdynamodb.Attribute{Name: jsii.String("userKey"), Type: awsdynamodb.AttributeType_STRING},
	&awsdynamodb.Attribute{Name: jsii.String("createdAtMs"), Type: awsdynamodb.AttributeType_NUMBER},
}

var partitionKey = &awsdynamodb.Attribute{Name: jsii.String("actionId"), Type: awsdynamodb.AttributeType_STRING}

func newTable(b *build, scope constructs.Construct) *Table {
	t := &Table{Construct: b.part(scope, "Table", false)}
	if b.MultiRegion != nil {
		t.newGlobal(b)
	} else {
		t.Table = awsdynamodb.NewTable(t.Construct, jsii.String("Actions"), &awsdynamodb.TableProps{
			PartitionKey:        partitionKey,
			BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
			TimeToLiveAttribute: jsii.String("ttl"),
			PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
				PointInTimeRecoveryEnabled: jsii.Bool(true),
			},
			Stream:             awsdynamodb.StreamViewType_NEW_AND_OLD_IMAGES,
			Encryption:         awsdynamodb.TableEncryption_AWS_MANAGED,
			DeletionProtection: jsii.Bool(!b.Throwaway),
			RemovalPolicy:      b.removal,
		})
		for _, ix := range []struct {
			name string
			keys struct{ pk, sk *awsdynamodb.Attribute }
		}{{store.ExpiryIndex, expiryIndex}, {store.UserIndex, userIndex}} {
			t.Table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
				IndexName: jsii.String(ix.name), PartitionKey: ix.keys.pk, SortKey: ix.keys.sk, ProjectionType: awsdynamodb.ProjectionType_KEYS_ONLY,
			})
		}
		t.Ref = t.Table
	}
	t.ExpiryIndexArn = jsii.String(*t.Ref.TableArn() + "/index/" + store.ExpiryIndex)
	return t
}

// newGlobal is the MRSC global table: created, with every replica and the
// witness, by the stack of the first Region; every other Region's stack
// refers to its own replica by name and reads that replica's stream ARN
// (known only once the replica exists) with one DescribeTable at deploy
// time. No TTL: MRSC tables do not support it (the sweeper's purge deletes
// what TTL would have).
func (t *Table) newGlobal(b *build) {
	m := b.MultiRegion
	stack := awscdk.Stack_Of(t.Construct)
	region := *stack.Region()
	if !slices.Contains(m.Regions, region) {
		panic(fmt.Sprintf("exactonce: MultiRegion needs the stack in one of its Regions %v (awscdk.StackProps.Env), not %q", m.Regions, region))
	}
	if region != m.Regions[0] {
		arn := stack.FormatArn(&awscdk.ArnComponents{Service: jsii.String("dynamodb"), Resource: jsii.String("table"), ResourceName: jsii.String(m.TableName)})
		describe := &customresources.AwsSdkCall{
			Service: jsii.String("DynamoDB"), Action: jsii.String("describeTable"),
			Parameters:         map[string]any{"TableName": m.TableName},
			PhysicalResourceId: customresources.PhysicalResourceId_FromResponse(jsii.String("Table.LatestStreamArn")),
			OutputPaths:        jsii.Strings("Table.LatestStreamArn"),
		}
		stream := customresources.NewAwsCustomResource(t.Construct, jsii.String("ReplicaStream"), &customresources.AwsCustomResourceProps{
			OnCreate: describe, OnUpdate: describe,
			Policy:              customresources.AwsCustomResourcePolicy_FromSdkCalls(&customresources.SdkCallsPolicyOptions{Resources: jsii.Strings(*arn)}),
			InstallLatestAwsSdk: jsii.Bool(false),
		})
		cdknag.NagSuppressions_AddStackSuppressions(stack, &[]*cdknag.NagPackSuppression{
			{Id: jsii.String("AwsSolutions-IAM4"), Reason: jsii.String("The CDK's AwsCustomResource provider (one DescribeTable of this Region's replica at deploy time, for its stream ARN) logs with AWSLambdaBasicExecutionRole."),
				AppliesTo: &[]any{jsii.String("Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole")}},
			{Id: jsii.String("AwsSolutions-L1"), Reason: jsii.String("The runtime of the CDK's AwsCustomResource provider is chosen by the CDK version pinned in go.mod; it runs only at deploy time.")},
		}, jsii.Bool(true))
		t.Ref = awsdynamodb.TableV2_FromTableAttributes(t.Construct, jsii.String("Actions"), &awsdynamodb.TableAttributesV2{
			TableArn: arn, TableStreamArn: stream.GetResponseField(jsii.String("Table.LatestStreamArn")), GrantIndexPermissions: jsii.Bool(true),
		})
		return
	}
	replicas := make([]*awsdynamodb.ReplicaTableProps, 0, len(m.Regions)-1)
	for _, r := range m.Regions[1:] {
		replicas = append(replicas, &awsdynamodb.ReplicaTableProps{Region: jsii.String(r)})
	}
	var witness *string
	if m.WitnessRegion != "" {
		witness = jsii.String(m.WitnessRegion)
	}
	index := func(name string, keys struct{ pk, sk *awsdynamodb.Attribute }) *awsdynamodb.GlobalSecondaryIndexPropsV2 {
		return &awsdynamodb.GlobalSecondaryIndexPropsV2{IndexName: jsii.String(name), PartitionKey: keys.pk, SortKey: keys.sk, ProjectionType: awsdynamodb.ProjectionType_KEYS_ONLY}
	}
	t.Global = awsdynamodb.NewTableV2(t.Construct, jsii.String("Actions"), &awsdynamodb.TablePropsV2{
		TableName:              jsii.String(m.TableName),
		PartitionKey:           partitionKey,
		Billing:                awsdynamodb.Billing_OnDemand(nil),
		MultiRegionConsistency: awsdynamodb.MultiRegionConsistency_STRONG,
		Replicas:               &replicas,
		WitnessRegion:          witness,
		DynamoStream:           awsdynamodb.StreamViewType_NEW_AND_OLD_IMAGES, // every replica: each Region's publisher reads its own
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:             awsdynamodb.TableEncryptionV2_AwsManagedKey(),
		DeletionProtection:     jsii.Bool(!b.Throwaway),
		RemovalPolicy:          b.removal,
		GlobalSecondaryIndexes: &[]*awsdynamodb.GlobalSecondaryIndexPropsV2{index(store.ExpiryIndex, expiryIndex), index(store.UserIndex, userIndex)},
	})
	t.Ref = t.Global
}
