// Command republish rebuilds from the table the events of every action
// consumed, canceled or marked expired in a time window and publishes them
// again with the same event ids (subscribers de-duplicate). It is both the
// Lambda an operator invokes and a command to run from a shell:
//
//	aws lambda invoke --function-name <RepublishFunctionName output> \
//	  --cli-binary-format raw-in-base64-out --payload '{"from":"2026-11-22T00:00:00Z","to":"2026-11-23T00:00:00Z"}' out.json
//
//	TABLE_NAME=<TableName output> EVENT_BUS_NAME=<EventBusName output> \
//	  go run ./functions/republish -from 2026-11-22T00:00:00Z -to 2026-11-23T00:00:00Z
//
// Settings: TABLE_NAME, EVENT_BUS_NAME, EVENT_SOURCE (default exactonce).
// From a shell, the default AWS credential chain must be allowed Scan on the
// table and PutEvents on the bus (the bus policy admits the publisher's and
// this function's roles for ExactOnce's source: assume the function's role).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/shared/app"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/publish"
	"github.com/exactonce/exactonce/shared/republish"
)

func main() {
	var req republish.Request
	flag.StringVar(&req.From, "from", "", "start of the window, RFC 3339 (required)")
	flag.StringVar(&req.To, "to", "", "end of the window, RFC 3339 (default now)")
	flag.IntVar(&req.Segments, "segments", republish.DefaultSegments, "segments of the parallel Scan")
	flag.Parse()

	table, bus, source := os.Getenv("TABLE_NAME"), os.Getenv("EVENT_BUS_NAME"), os.Getenv("EVENT_SOURCE")
	if table == "" || bus == "" {
		log.Fatal("TABLE_NAME and EVENT_BUS_NAME must be set")
	}
	if source == "" {
		source = events.DefaultSource
	}
	ctx := context.Background()
	awsCfg, err := awsconfig.Load(ctx)
	if err != nil {
		log.Fatal(err)
	}
	logger := app.Logger()
	r := &republish.Republisher{DB: dynamodb.NewFromConfig(awsCfg), Table: table, Log: logger,
		Publisher: publish.New(eventbridge.NewFromConfig(awsCfg), bus, source, logger)}
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") != "" {
		lambda.Start(r.Handle)
		return
	}
	if req.From == "" {
		flag.Usage()
		os.Exit(2)
	}
	res, err := r.Handle(ctx, req)
	out, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(out))
	if err != nil {
		log.Fatal(err)
	}
}
