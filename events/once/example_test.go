package once_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/events/once"
)

// ship is the subscriber's side effect.
func ship(_ context.Context, actionID string) error {
	fmt.Println("shipping", actionID)
	return nil
}

// A subscriber that ships once per action.consumed event, however often
// EventBridge delivers it (docs/events.md, "Writing a subscriber").
func Example() {
	ctx := context.Background()
	awsCfg := localConfig(httpClient()) // in Lambda: config.LoadDefaultConfig(ctx)
	table := "dedupe-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := once.CreateTable(ctx, dynamodb.NewFromConfig(awsCfg), table); err != nil {
		panic(err)
	}
	if err := os.Setenv("DEDUPE_TABLE", table); err != nil { // in Lambda: set by the stack
		panic(err)
	}

	guard := once.New(dynamodb.NewFromConfig(awsCfg), os.Getenv("DEDUPE_TABLE"))

	handle := func(ctx context.Context, ev lambdaevents.CloudWatchEvent) error {
		e, err := events.Parse(ev)
		if err != nil {
			return err // unknown version: upgrade the events package
		}
		_, err = guard.Do(ctx, e.Common().EventID, func(ctx context.Context) error {
			if e.Consumed != nil {
				return ship(ctx, e.Consumed.ActionID) // your side effect
			}
			return nil
		})
		return err // once.ErrInProgress too: another delivery holds it, retry later
	}

	// lambda.Start(handle) in a Lambda; here one event delivered twice.
	ev := lambdaevents.CloudWatchEvent{Source: "exactonce", DetailType: events.TypeConsumed, Detail: json.RawMessage(
		`{"version":"1","eventId":"e4d495510d699edfb2d184f168fd9cd7","actionId":"coupon-42","userId":"u-1",` +
			`"occurredAt":"2026-11-22T19:02:50.688Z","consumedAt":"2026-11-22T19:02:50.688Z"}`)}
	fmt.Println(handle(ctx, ev))
	fmt.Println(handle(ctx, ev))
	// Output:
	// shipping coupon-42
	// <nil>
	// <nil>
}
