package awsconfig

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TestRetryerReplicatedWriteConflict: the SDK configuration every function
// (Load) and the local server (Local) build their clients from retries an
// MRSC write conflict, and still what the standard retryer retries, and not
// a failed condition.
func TestRetryerReplicatedWriteConflict(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	cfg, err := Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]aws.Config{"AWS": cfg, "Local": Local("http://127.0.0.1:1")} {
		if c.Retryer == nil {
			t.Fatalf("%s: no retryer", name)
		}
		r := c.Retryer()
		for err, want := range map[error]bool{
			&types.ReplicatedWriteConflictException{Message: aws.String("another Region")}: true,
			&types.ProvisionedThroughputExceededException{}:                                true,
			&types.ConditionalCheckFailedException{}:                                       false,
		} {
			if got := r.IsErrorRetryable(err); got != want {
				t.Errorf("%s: %T retryable %v, want %v", name, err, got, want)
			}
		}
	}
}

// TestLocalOutlastsDynamoDBLocalLockWaits: DynamoDB Local runs one writer at
// a time, and on a loaded machine it answers a request that waited too long
// for its lock with a 500 ("This request will succeed in actual DynamoDB
// API"; nothing was applied). Local's clients send such a request again, more
// often than the SDK's 3 attempts and its retry quota would, and it counts as
// one request at any HTTP client wrapped around Local's (testkit.Counter);
// another 500 is left to the SDK's retries.
func TestLocalOutlastsDynamoDBLocalLockWaits(t *testing.T) {
	const lockWait = `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"This action timed out because it too long waiting for a lock. This request will succeed in actual DynamoDB API"}`
	for _, c := range []struct {
		name          string
		refusals      int
		body          string
		ok            bool
		wantAtTheFake int
	}{
		{"lock waits", 6, lockWait, true, 7},
		{"another 500", 6, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"boom"}`, false, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int32
			fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if !strings.Contains(string(body), `"TableName":"t"`) {
					t.Errorf("request %d sent without its body: %q", calls.Load()+1, body)
				}
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				if calls.Add(1) <= int32(c.refusals) {
					w.WriteHeader(500)
					_, _ = w.Write([]byte(c.body))
					return
				}
				_, _ = w.Write([]byte(`{}`))
			}))
			defer fake.Close()
			cfg := Local(fake.URL)
			local := cfg.Retryer
			cfg.Retryer = func() aws.Retryer { return retry.AddWithMaxBackoffDelay(local(), time.Millisecond) } // Local's retries, short waits
			sent := 0
			cfg.HTTPClient = countingClient{cfg.HTTPClient, &sent}
			_, err := dynamodb.NewFromConfig(cfg).GetItem(context.Background(), &dynamodb.GetItemInput{
				TableName: aws.String("t"), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "x"}}})
			if (err == nil) != c.ok || int(calls.Load()) != c.wantAtTheFake {
				t.Fatalf("err %v after %d requests at DynamoDB, want ok=%v after %d", err, calls.Load(), c.ok, c.wantAtTheFake)
			}
			if c.ok && sent != 1 {
				t.Errorf("the SDK sent %d requests, want 1", sent)
			}
		})
	}
}

type countingClient struct {
	next aws.HTTPClient
	n    *int
}

func (c countingClient) Do(r *http.Request) (*http.Response, error) { *c.n++; return c.next.Do(r) }

// TestRetryerRetriesAConflictAfterAStorm: after a storm of write conflicts
// (another Region writing the same items for a while), a write that meets
// one conflict is still retried, as deploying.md says of every write ("3
// attempts"), by both configurations. The standard retryer's retry quota
// (500 tokens, 5 a retry, 1 back per first-try success) ran out in the storm
// and then let no write retry: each conflict became a 503 at once (helper-44,
// TestMRSCAttackStormThenOneConflict: 10 of 10).
func TestRetryerRetriesAConflictAfterAStorm(t *testing.T) {
	const (
		conflict = `{"__type":"com.amazonaws.dynamodb.v20120810#ReplicatedWriteConflictException","message":"another Region"}`
		throttle = `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"slow down"}`
	)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "local")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "local")
	loaded, err := Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]aws.Config{"AWS": loaded, "Local": Local("")} {
		t.Run(name, func(t *testing.T) {
			var storm atomic.Bool
			var calls, refuse atomic.Int32
			var answer atomic.Value
			answer.Store(conflict)
			fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				if storm.Load() || refuse.Add(-1) >= 0 {
					w.WriteHeader(400)
					_, _ = w.Write([]byte(answer.Load().(string)))
					return
				}
				_, _ = w.Write([]byte(`{}`))
			}))
			defer fake.Close()
			cfg.BaseEndpoint = aws.String(fake.URL)
			base := cfg.Retryer
			cfg.Retryer = func() aws.Retryer { return retry.AddWithMaxBackoffDelay(base(), time.Millisecond) } // short waits
			db := dynamodb.NewFromConfig(cfg)
			write := func() error {
				_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: aws.String("t"),
					Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "x"}}})
				return err
			}
			storm.Store(true)
			for range 100 {
				if write() == nil {
					t.Fatal("a write succeeded in the storm")
				}
			}
			storm.Store(false)
			stormCalls := calls.Load()
			failed := 0
			for range 10 {
				refuse.Store(1) // this write's first attempt conflicts
				if err := write(); err != nil {
					failed++
				}
			}
			t.Logf("storm: 100 writes, %d attempts; then 10 writes meeting one conflict each: %d failed", stormCalls, failed)
			if stormCalls != 300 || failed > 0 {
				t.Fatalf("%d attempts in the storm (want 3 a write), %d of 10 single conflicts not retried after it", stormCalls, failed)
			}
			// Throttles still spend the quota, as the SDK means them to: after
			// a storm of them a single throttle is not retried.
			answer.Store(throttle)
			storm.Store(true)
			for range 100 {
				_ = write()
			}
			storm.Store(false)
			refuse.Store(1)
			if err := write(); err == nil {
				t.Error("after a storm of throttles a single throttle was retried: the quota was not kept for them")
			}
		})
	}
}
