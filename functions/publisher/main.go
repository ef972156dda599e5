// Command publisher is the Lambda on the table's DynamoDB stream: it
// publishes action.consumed, action.canceled and action.expired to the
// EventBridge bus (EVENT_BUS_NAME, source EVENT_SOURCE).
package main

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/exactonce/exactonce/shared/app"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/publish"
	"github.com/exactonce/exactonce/shared/telemetry"
)

func main() {
	bus, source := os.Getenv("EVENT_BUS_NAME"), os.Getenv("EVENT_SOURCE")
	if bus == "" {
		log.Fatal("EVENT_BUS_NAME is not set")
	}
	if source == "" {
		source = "exactonce"
	}
	awsCfg, err := config.AWS(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	p := publish.New(eventbridge.NewFromConfig(awsCfg), bus, source, app.Logger())
	p.Metrics = telemetry.New(os.Stdout)
	lambda.Start(p.Handle)
}
