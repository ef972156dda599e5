package client_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/exactonce/exactonce/client"
)

func charge(context.Context, int) (any, error) { return map[string]string{"charge": "ch_1"}, nil }

// Consume an action and tell "already used" apart from other failures.
func ExampleClient_Consume() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080") // or the ApiUrl output, with client.WithSigV4(awsCfg)
	a, err := c.Consume(ctx, "coupon-42", client.ConsumeInput{Reason: "checkout 981"})
	var e *client.Error
	switch {
	case errors.Is(err, client.ErrAlreadyUsed) && errors.As(err, &e):
		log.Printf("already used at %s", e.ConsumedAt)
	case err != nil:
		log.Print(err)
	default:
		log.Printf("consumed at %s", a.ConsumedAt)
	}
}

// Run a payment at most once per order, whoever retries.
func ExampleClient_Do() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080")
	receipt, err := c.Do(ctx, "order-1204-pay", "amount=500&card=tok_1", 30*time.Second,
		func(ctx context.Context) (any, error) { return charge(ctx, 500) })
	if err != nil {
		log.Print(err)
		return
	}
	log.Printf("receipt %s", receipt)
}
