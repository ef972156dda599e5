// Command sweeper is the scheduled Lambda (every minute) that marks due
// actions expired, so action.expired is published promptly; DynamoDB TTL
// only cleans up afterwards. Settings: TABLE_NAME, EXACTONCE_EXPIRY_SHARDS.
package main

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/shared/app"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/sweep"
	"github.com/exactonce/exactonce/shared/telemetry"
)

func main() {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	awsCfg, err := config.AWS(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	s := &sweep.Sweeper{Store: cfg.Store(dynamodb.NewFromConfig(awsCfg)), Log: app.Logger(), Metrics: telemetry.New(os.Stdout)}
	lambda.Start(s.Run)
}
