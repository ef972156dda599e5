package store_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestCreateTableAddsExpiryIndex: a table kept from before the expiry index
// (a local data folder) gains it; a current table is left as it is.
func TestCreateTableAddsExpiryIndex(t *testing.T) {
	ctx := context.Background()
	db := dynamodb.NewFromConfig(config.Local(testkit.Endpoint))
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("old"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("actionId"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("actionId"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := store.CreateTable(ctx, db, "old"); err != nil {
			t.Fatal(err)
		}
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("old")})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(out.Table.GlobalSecondaryIndexes); n != 1 || aws.ToString(out.Table.GlobalSecondaryIndexes[0].IndexName) != store.ExpiryIndex {
			t.Fatalf("indexes: %+v", out.Table.GlobalSecondaryIndexes)
		}
	}
}
