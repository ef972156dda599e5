package testkit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/awsconfig"
)

// TestCounterTellsRetries: a call the SDK re-sends after a 500 is two
// requests, one of them a retry.
func TestCounterTellsRetries(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"x"}`))
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	cfg := awsconfig.Local(srv.URL)
	counter := testkit.NewCounter(cfg.HTTPClient)
	cfg.HTTPClient = counter
	db := dynamodb.NewFromConfig(cfg)
	if _, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("t"),
		Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: "a"}}}); err != nil {
		t.Fatal(err)
	}
	retried := counter.Retried()
	if ops := counter.Take(); ops["GetItem"] != 2 || retried["GetItem"] != 1 {
		t.Fatalf("requests %v, retries %v: want 2 GetItem, 1 of them a retry", ops, retried)
	}
	if r := counter.Retried(); len(r) != 0 {
		t.Errorf("after Take: retries %v, want none", r)
	}
}
