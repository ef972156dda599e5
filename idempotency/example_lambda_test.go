package idempotency_test

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/dynamostore"
)

// A whole Lambda function (in yours: package main, and this body is func
// main). The DynamoDB client comes from the function's role and Region, the
// keys table's name from the environment the stack gives it, and the
// handler is wrapped once, at cold start, not per invocation.
func Example_lambdaFunction() {
	type (
		Order struct {
			OrderID string `json:"orderId"`
			Amount  int    `json:"amount"`
		}
		Receipt struct {
			Charge string `json:"charge"`
		}
	)
	cfg, err := config.LoadDefaultConfig(context.Background()) // the function's role and Region
	if err != nil {
		log.Fatal(err)
	}
	db := dynamodb.NewFromConfig(cfg)
	table := os.Getenv("IDEMPOTENCY_TABLE") // idemtable.New's table (see the stack below)

	charge := func(ctx context.Context, o Order) (Receipt, error) {
		return Receipt{Charge: "ch_" + o.OrderID}, nil // the side effect: your payment call
	}
	handler := idempotency.Wrap(charge, idempotency.Options[Order, Receipt]{
		Store:   dynamostore.New(db, table),
		Key:     idempotency.KeyJMESPath[Order]("orderId"),
		Payload: idempotency.PayloadJMESPath[Order]("[orderId, amount]"),
	})
	lambda.Start(handler)
}
