// Command audit is the example subscriber Lambda (deployed with the CDK
// context exactonce:exampleSubscriber=true): an EventBridge rule on the
// ExactOnce bus invokes it, and it logs one audit line per event, once per
// eventId (claims in the DEDUPE_TABLE DynamoDB table); events whose source is
// not EVENT_SOURCE (default exactonce) are refused.
package main

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/events/once"
	"github.com/exactonce/exactonce/shared/app"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/examplesubscriber"
)

func main() {
	table := os.Getenv("DEDUPE_TABLE")
	if table == "" {
		log.Fatal("DEDUPE_TABLE is not set")
	}
	awsCfg, err := awsconfig.Load(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	s := &examplesubscriber.Subscriber{Guard: once.New(dynamodb.NewFromConfig(awsCfg), table), Log: app.Logger(), Source: os.Getenv("EVENT_SOURCE")}
	lambda.Start(s.Handle)
}
