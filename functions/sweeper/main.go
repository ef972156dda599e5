// Command sweeper is the scheduled Lambda (every minute) that marks due
// actions expired, so action.expired is published promptly; DynamoDB TTL
// only cleans up afterwards. On a multi-Region (MRSC) table, which has no
// TTL, a daily {"purge": true} deletes what TTL would have.
// Settings: TABLE_NAME, EXACTONCE_EXPIRY_SHARDS.
package main

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/shared/app"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/sweep"
	"github.com/exactonce/exactonce/shared/telemetry"
)

func main() {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	awsCfg, err := awsconfig.Load(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	st, logger, metrics := app.Store(cfg, dynamodb.NewFromConfig(awsCfg)), app.Logger(), telemetry.New(os.Stdout)
	// A sweep keeps its 50 s budget where the function's timeout is the
	// purge's 15 minutes (multi-Region stacks), so a sweep never holds one of
	// the two reserved slots for long; the purge's budget is the timeout's.
	sweeper := &sweep.Sweeper{Store: st, Log: logger, Metrics: metrics, Budget: sweep.DefaultBudget}
	lambda.Start(sweep.Handler(sweeper, &sweep.Purger{Store: st, Log: logger, Metrics: metrics}))
}
