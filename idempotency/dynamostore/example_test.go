package dynamostore_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/idempotency/dynamostore"
)

// Make a keys table yourself: on DynamoDB Local for development (`java
// -jar DynamoDBLocal.jar -inMemory`, port 8000), or in AWS from a setup
// program (leave the endpoint and the static credentials out).
func ExampleCreateTable() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", ""))) // DynamoDB Local takes any
	if err != nil {
		log.Fatal(err)
	}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String("http://localhost:8000")
		o.DisableValidateResponseChecksum = true // DynamoDB Local: see the note on checksums above
	})
	// On-demand, partition key "id" (""), TTL on "ttl"; an existing table is left as it is.
	if err := dynamostore.CreateTable(ctx, db, "idempotency-keys", ""); err != nil {
		log.Fatal(err)
	}
	store := dynamostore.New(db, "idempotency-keys") // for idempotency.Options.Store
	log.Printf("keys in %s", store.Name)
}
