package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// CreateTable makes a keys table (partition key partitionKey of type S, ""
// for DefaultPartitionKey; on-demand; TTL on "ttl") and waits until it is
// active. An existing table is left as it is. For deployed tables use the
// CDK helper in infra/idemtable.
func CreateTable(ctx context.Context, db *dynamodb.Client, name, partitionKey string) error {
	if partitionKey == "" {
		partitionKey = DefaultPartitionKey
	}
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &name,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: &partitionKey, AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: &partitionKey, KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	switch {
	case errors.As(err, &inUse):
		return nil
	case err != nil:
		return fmt.Errorf("dynamostore: create table %s: %w", name, err)
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &name}, time.Minute); err != nil {
		return fmt.Errorf("dynamostore: wait for table %s: %w", name, err)
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &name,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(TTLAttribute), Enabled: aws.Bool(true)},
	})
	if err != nil {
		return fmt.Errorf("dynamostore: enable ttl on %s: %w", name, err)
	}
	return nil
}
