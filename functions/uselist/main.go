// Command uselist is the Lambda behind GET /actions/{actionId}/uses.
package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/exactonce/exactonce/shared/app"
)

func main() {
	api, err := app.FromEnv(context.Background(), app.Needs{}) // no secret: a listing reads no body, PIN or payload
	if err != nil {
		log.Fatal(err) // a cold start without config must fail loudly, not serve 500s
	}
	lambda.Start(api.ListUses)
}
