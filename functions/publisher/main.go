// Command publisher is the Lambda on the table's DynamoDB stream: it
// publishes action.consumed, action.canceled and action.expired to the
// EventBridge bus (EVENT_BUS_NAME, source EVENT_SOURCE). A stream record it
// cannot read is, after its retries, set aside on the on-failure queue
// (ON_FAILURE_QUEUE_URL) with its keys, sequence number, time and error.
package main

import (
	"context"
	"encoding/json"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/shared/app"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/publish"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/telemetry"
)

func main() {
	bus, source, queue := os.Getenv("EVENT_BUS_NAME"), os.Getenv("EVENT_SOURCE"), os.Getenv("ON_FAILURE_QUEUE_URL")
	if bus == "" {
		log.Fatal("EVENT_BUS_NAME is not set")
	}
	if source == "" {
		source = events.DefaultSource
	}
	awsCfg, err := awsconfig.Load(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	p := publish.New(eventbridge.NewFromConfig(awsCfg), bus, source, app.Logger())
	p.Metrics = telemetry.New(os.Stdout)
	// Use events read the action and the take's record from the table.
	if table := os.Getenv(config.EnvTable); table != "" {
		p.Uses = store.New(dynamodb.NewFromConfig(awsCfg), table, store.Options{})
	}
	if queue != "" {
		q := sqs.NewFromConfig(awsCfg)
		p.SetAside = func(ctx context.Context, a publish.Aside) error {
			body, err := json.Marshal(a)
			if err != nil {
				return err
			}
			_, err = q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(string(body))})
			return err
		}
	}
	lambda.Start(p.Handle)
}
