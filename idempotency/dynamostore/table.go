package dynamostore

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/dynamoitem"
)

// CreateTable makes a keys table (partition key partitionKey of type S, ""
// for DefaultPartitionKey; on-demand; TTL on "ttl") and waits until it is
// active. An existing table is left as it is. For deployed tables use the
// CDK helper in infra/idemtable.
func CreateTable(ctx context.Context, db *dynamodb.Client, name, partitionKey string) error {
	if partitionKey == "" {
		partitionKey = DefaultPartitionKey
	}
	_, err := dynamoitem.CreateTable(ctx, db, &dynamodb.CreateTableInput{
		TableName:            &name,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: &partitionKey, AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: &partitionKey, KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}, TTLAttribute)
	if err != nil {
		return fmt.Errorf("dynamostore: %w", err)
	}
	return nil
}
