package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/backoff"
	"github.com/exactonce/exactonce/internal/dynamoitem"
)

// CreateTable makes the actions table the way the CDK stack does (key,
// on-demand, TTL on ttl, the expiry index and, with stream, its stream of
// both images), for the local server and tests. An existing table is kept;
// it gains the expiry index if it lacks it (a data folder from an older
// version). A table whose stream nothing reads is made without one:
// DynamoDB Local's writes cost more on a table with a stream, the more so
// the more such tables it holds (its CPU per conditional write, measured on
// one instance: 1.0-1.5 ms without a stream, 1.8 ms on the first table with
// one, then 3.7, 4.7, 5.9 and 8.3 ms on the next ones).
func CreateTable(ctx context.Context, db *dynamodb.Client, name string, stream bool) error {
	in := &dynamodb.CreateTableInput{
		TableName:              &name,
		AttributeDefinitions:   attributeDefinitions,
		KeySchema:              []types.KeySchemaElement{{AttributeName: aws.String(attrID), KeyType: types.KeyTypeHash}},
		BillingMode:            types.BillingModePayPerRequest,
		GlobalSecondaryIndexes: indexes,
	}
	if stream {
		in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages}
	}
	exists, err := dynamoitem.CreateTable(ctx, db, in, attrTTL)
	switch {
	case err != nil:
		return fmt.Errorf("store: %w", err)
	case exists:
		return addIndexes(ctx, db, name)
	}
	return nil
}

var attributeDefinitions = []types.AttributeDefinition{
	{AttributeName: aws.String(attrID), AttributeType: types.ScalarAttributeTypeS},
	{AttributeName: aws.String(attrExpShard), AttributeType: types.ScalarAttributeTypeS},
	{AttributeName: aws.String(attrExpiresAtMs), AttributeType: types.ScalarAttributeTypeN},
	{AttributeName: aws.String(attrUserKey), AttributeType: types.ScalarAttributeTypeS},
	{AttributeName: aws.String(attrCreatedAtMs), AttributeType: types.ScalarAttributeTypeN},
}

// indexes are the table's global secondary indexes, both keys-only and
// sparse: written by the create alone, so no later write touches them.
var indexes = []types.GlobalSecondaryIndex{expiryIndex, userIndex}

var expiryIndex = types.GlobalSecondaryIndex{
	IndexName: aws.String(ExpiryIndex),
	KeySchema: []types.KeySchemaElement{
		{AttributeName: aws.String(attrExpShard), KeyType: types.KeyTypeHash},
		{AttributeName: aws.String(attrExpiresAtMs), KeyType: types.KeyTypeRange},
	},
	Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
}

// addIndexes gives an existing table (a data folder from an older version)
// the indexes it lacks, one UpdateTable each, each once the one before is
// active (DynamoDB creates one at a time: "Only 1 online index can be
// created or deleted simultaneously per table").
func addIndexes(ctx context.Context, db *dynamodb.Client, name string) error {
	t, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name})
	if err != nil {
		return fmt.Errorf("describe table %s: %w", name, err)
	}
	have := map[string]bool{}
	for _, gsi := range t.Table.GlobalSecondaryIndexes {
		have[aws.ToString(gsi.IndexName)] = true
	}
	for _, ix := range indexes {
		if have[aws.ToString(ix.IndexName)] {
			continue
		}
		_, err = db.UpdateTable(ctx, &dynamodb.UpdateTableInput{
			TableName:            &name,
			AttributeDefinitions: attributeDefinitions,
			GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: &types.CreateGlobalSecondaryIndexAction{
				IndexName: ix.IndexName, KeySchema: ix.KeySchema, Projection: ix.Projection,
			}}},
		})
		if err != nil {
			return fmt.Errorf("add the index %s to %s: %w", aws.ToString(ix.IndexName), name, err)
		}
		if err := indexActive(ctx, db, name, aws.ToString(ix.IndexName)); err != nil {
			return err
		}
	}
	return nil
}

// indexActive waits, up to indexWait, until the table's index is ACTIVE.
func indexActive(ctx context.Context, db *dynamodb.Client, table, index string) error {
	ctx, cancel := context.WithTimeout(ctx, indexWait)
	defer cancel()
	for {
		t, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
		if err != nil {
			return fmt.Errorf("wait for the index %s of %s: %w", index, table, err)
		}
		for _, gsi := range t.Table.GlobalSecondaryIndexes {
			if aws.ToString(gsi.IndexName) == index && gsi.IndexStatus == types.IndexStatusActive {
				return nil
			}
		}
		if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("wait for the index %s of %s: %w", index, table, err)
		}
	}
}

// indexWait bounds the wait for a new index (DynamoDB Local: a moment;
// DynamoDB: minutes on a large table).
const indexWait = 10 * time.Minute
