package exactonce

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/exactonce/exactonce/shared/store"
)

// Table is the actions table and its expiry index.
type Table struct {
	constructs.Construct
	// Table holds actions and idempotency keys (store), on demand, with a
	// NEW_AND_OLD_IMAGES stream for the publisher and TTL on "ttl".
	Table awsdynamodb.Table
	// ExpiryIndexArn is the ARN of the sparse expiry index (store.ExpiryIndex).
	ExpiryIndexArn *string
}

func newTable(b *build, scope constructs.Construct) *Table {
	t := &Table{Construct: b.part(scope, "Table", false)}
	t.Table = awsdynamodb.NewTable(t.Construct, jsii.String("Actions"), &awsdynamodb.TableProps{
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String("actionId"), Type: awsdynamodb.AttributeType_STRING},
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
	// Keys-only and written by the create alone: finishing an action leaves
	// its entry (no index write); the sweeper reads each due entry once,
	// behind per-shard watermarks, and skips the finished ones.
	t.Table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:      jsii.String(store.ExpiryIndex),
		PartitionKey:   &awsdynamodb.Attribute{Name: jsii.String("expShard"), Type: awsdynamodb.AttributeType_STRING},
		SortKey:        &awsdynamodb.Attribute{Name: jsii.String("expiresAtMs"), Type: awsdynamodb.AttributeType_NUMBER},
		ProjectionType: awsdynamodb.ProjectionType_KEYS_ONLY,
	})
	t.ExpiryIndexArn = jsii.String(*t.Table.TableArn() + "/index/" + store.ExpiryIndex)
	// Sparse and keys-only: a user's actions by creation time, written by
	// the create alone (consume, cancel and expiry never touch its keys).
	t.Table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:      jsii.String(store.UserIndex),
		PartitionKey:   &awsdynamodb.Attribute{Name: jsii.String("userKey"), Type: awsdynamodb.AttributeType_STRING},
		SortKey:        &awsdynamodb.Attribute{Name: jsii.String("createdAtMs"), Type: awsdynamodb.AttributeType_NUMBER},
		ProjectionType: awsdynamodb.ProjectionType_KEYS_ONLY,
	})
	return t
}
