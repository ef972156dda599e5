package client_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/exactonce/exactonce/client"
)

// Call the deployed API with IAM authorization (the stack's default): every
// request is signed with SigV4, with the credentials of the SDK's default
// chain (environment variables, the shared config and SSO, or the role of
// the task, function or instance), for the Region of the stack.
func ExampleWithSigV4() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("eu-west-1"))
	if err != nil {
		log.Fatal(err)
	}
	c := client.New("https://abc123.execute-api.eu-west-1.amazonaws.com", client.WithSigV4(cfg))
	a, err := c.CreateAction(ctx, client.CreateInput{UserID: "u-1", Kind: "coupon"})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("created %s, active until %s", a.ActionID, a.ExpiresAt)
}
