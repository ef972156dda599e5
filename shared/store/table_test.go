package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestCreateTableAddsIndexes: a table kept from before the expiry and user
// indexes (a local data folder) gains them; a current table is left as it is.
//
// Serial: DynamoDB Local never finished the index it adds (not ACTIVE
// after minutes, in 2 of 3 runs under -race) while the package's other
// tests created tables beside it.
func TestCreateTableAddsIndexes(t *testing.T) {
	ctx := context.Background()
	db := dynamodb.NewFromConfig(awsconfig.Local(testkit.DynamoDB(t)))
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
		if err := store.CreateTable(ctx, db, "old", true); err != nil {
			t.Fatal(err)
		}
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("old")})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, ix := range out.Table.GlobalSecondaryIndexes {
			names = append(names, aws.ToString(ix.IndexName))
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{store.ExpiryIndex, store.UserIndex}) {
			t.Fatalf("indexes: %v", names)
		}
	}
}
