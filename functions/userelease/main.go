// Command userelease is the Lambda behind POST /actions/{actionId}/uses/{useId}/release.
package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/exactonce/exactonce/shared/app"
)

func main() {
	api, err := app.FromEnv(context.Background(), app.Needs{Keys: true}) // keyed fingerprints, key digests and log hashes
	if err != nil {
		log.Fatal(err) // a cold start without config must fail loudly, not serve 500s
	}
	lambda.Start(api.ReleaseUse)
}
