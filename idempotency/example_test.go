package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/batch"
	"github.com/exactonce/exactonce/idempotency/dynamostore"
)

// freshTable creates a keys table on DynamoDB Local with a new name, so the
// examples print the same however often they run.
func freshTable(db *dynamodb.Client, prefix string) string {
	name := prefix + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := dynamostore.CreateTable(context.Background(), db, name, ""); err != nil {
		panic(err)
	}
	return name
}

// An API Gateway (HTTP API) handler made idempotent by its Idempotency-Key
// header: the charge runs once, a retry gets the stored response (marked by
// the replay hook), and the same key with another order or amount is refused.
// Key and payload are Powertools' JMESPath expressions, as a Powertools user
// writes them (event_key_jmespath, payload_validation_jmespath).
func Example_apiGateway() {
	type (
		Request  = events.APIGatewayV2HTTPRequest
		Response = events.APIGatewayV2HTTPResponse
	)
	ctx := context.Background()
	db := localDynamoDB() // in Lambda: dynamodb.NewFromConfig(awsCfg)
	table := freshTable(db, "payments")

	charge := func(ctx context.Context, req Request) (Response, error) {
		var in struct {
			Order  string `json:"order"`
			Amount int    `json:"amount"`
		}
		if err := json.Unmarshal([]byte(req.Body), &in); err != nil {
			return Response{StatusCode: 400}, nil
		}
		fmt.Println("charging", in.Order, in.Amount) // the side effect
		return Response{StatusCode: 201, Body: fmt.Sprintf(`{"charge":"ch_%s"}`, in.Order)}, nil
	}
	idempotent := idempotency.Wrap(charge, idempotency.Options[Request, Response]{
		Store:     dynamostore.New(db, table),
		Namespace: "charge",
		Key:       idempotency.KeyJMESPath[Request](`headers."idempotency-key"`),
		Payload:   idempotency.PayloadJMESPath[Request]("powertools_json(body).[order, amount]"),
		OnReplay: func(ctx context.Context, key string, r Response, _ time.Time) Response {
			r.Headers = map[string]string{"Idempotent-Replayed": "true"}
			return r
		},
	})
	handler := func(ctx context.Context, req Request) (Response, error) {
		resp, err := idempotent(ctx, req)
		switch {
		case errors.Is(err, idempotency.ErrPayloadMismatch):
			return Response{StatusCode: 422, Body: `{"error":"idempotency_key_reused"}`}, nil
		case errors.Is(err, idempotency.ErrInProgress):
			return Response{StatusCode: 409, Headers: map[string]string{"Retry-After": "1"}}, nil
		}
		return resp, err
	}
	// lambda.Start(handler) in a Lambda; here three requests.
	for _, body := range []string{`{"order":"o-1","amount":500}`, `{"amount":500, "order":"o-1"}`, `{"order":"o-1","amount":900}`} {
		resp, err := handler(ctx, Request{Headers: map[string]string{"idempotency-key": "k-1"}, Body: body})
		fmt.Println(resp.StatusCode, resp.Body, "replayed:", resp.Headers["Idempotent-Replayed"] == "true", err)
	}
	// Output:
	// charging o-1 500
	// 201 {"charge":"ch_o-1"} replayed: false <nil>
	// 201 {"charge":"ch_o-1"} replayed: true <nil>
	// 422 {"error":"idempotency_key_reused"} replayed: false <nil>
}

// An SQS batch handler: each message under its own key (its message id), the
// failed ones reported to Lambda, and a message delivered again after it was
// handled replayed instead of shipped twice.
func Example_sqsBatch() {
	ctx := context.Background()
	db := localDynamoDB()
	table := freshTable(db, "shipments")

	warehouseDown := true
	ship := func(ctx context.Context, m events.SQSMessage) (string, error) {
		if m.Body == "parcel-2" && warehouseDown {
			return "", errors.New("warehouse down") // releases the key: the retry runs it
		}
		fmt.Println("shipping", m.Body)
		return "shipped " + m.Body, nil
	}
	handler := batch.SQS(idempotency.Wrap(ship, idempotency.Options[events.SQSMessage, string]{
		Store:   dynamostore.New(db, table),
		Key:     batch.SQSMessageID,
		Payload: batch.SQSBody,
	}))
	failed := func(r events.SQSEventResponse) (ids []string) {
		for _, f := range r.BatchItemFailures {
			ids = append(ids, f.ItemIdentifier)
		}
		return ids
	}

	// lambda.Start(handler) in a Lambda; here two deliveries.
	resp, _ := handler(ctx, events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m-1", Body: "parcel-1"}, {MessageId: "m-2", Body: "parcel-2"}, {MessageId: "m-3", Body: "parcel-3"},
	}})
	fmt.Println("batch item failures:", failed(resp))

	warehouseDown = false
	// SQS redelivers m-2; m-1 comes again too (at-least-once delivery).
	resp, _ = handler(ctx, events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m-2", Body: "parcel-2"}, {MessageId: "m-1", Body: "parcel-1"},
	}})
	fmt.Println("batch item failures:", failed(resp))
	// Output:
	// shipping parcel-1
	// shipping parcel-3
	// batch item failures: [m-2]
	// shipping parcel-2
	// batch item failures: []
}
