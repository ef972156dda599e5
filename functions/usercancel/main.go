// Command usercancel is the Lambda behind POST /users/{userId}/actions/cancel.
package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/exactonce/exactonce/shared/app"
)

func main() {
	api, err := app.FromEnv(context.Background(), app.Needs{Keys: true}) // keyed fingerprints and key digests of the call
	if err != nil {
		log.Fatal(err) // a cold start without config must fail loudly, not serve 500s
	}
	lambda.Start(api.CancelUser)
}
