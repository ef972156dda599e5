package streams_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/streams"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestBatchItemFailures: like the Lambda event source mapping, the reader
// retries a batch from the first record the handler reports as failed (and
// the whole batch after an error), so every record is accepted exactly
// once, in order, with none skipped.
func TestBatchItemFailures(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := config.Local(testkit.Endpoint)
	db := dynamodb.NewFromConfig(cfg)
	if err := store.CreateTable(ctx, db, "streams-test"); err != nil {
		t.Fatal(err)
	}
	const n = 25
	var want []string
	for i := range n {
		id := fmt.Sprintf("a%02d", i)
		want = append(want, id)
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("streams-test"),
			Item: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}}})
		if err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var accepted []string
	calls := 0
	handle := func(_ context.Context, ev lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch calls {
		case 2: // fail the 4th record of this batch: the first 3 are accepted
			for _, r := range ev.Records[:3] {
				accepted = append(accepted, r.Change.Keys["actionId"].String())
			}
			return lambdaevents.DynamoDBEventResponse{BatchItemFailures: []lambdaevents.DynamoDBBatchItemFailure{
				{ItemIdentifier: ev.Records[3].Change.SequenceNumber},
			}}, nil
		case 3: // the whole retried batch fails
			return lambdaevents.DynamoDBEventResponse{}, errors.New("function error")
		}
		for _, r := range ev.Records {
			accepted = append(accepted, r.Change.Keys["actionId"].String())
		}
		return lambdaevents.DynamoDBEventResponse{}, nil
	}
	r := &streams.Reader{DB: db, Streams: dynamodbstreams.NewFromConfig(cfg), Table: "streams-test",
		Handle: handle, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Batch: 10, Poll: 20 * time.Millisecond}
	go r.Run(ctx)

	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		got := slices.Clone(accepted)
		mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			if !slices.Equal(got, want) {
				t.Fatalf("accepted %v\nwant     %v", got, want)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls < 5 {
		t.Errorf("%d handler calls; want the failed batch retried twice", calls)
	}
}
