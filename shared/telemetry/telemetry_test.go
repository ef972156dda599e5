package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/telemetry"
)

func TestEmitEMF(t *testing.T) {
	var out bytes.Buffer
	m := telemetry.New(&out)
	m.Emit([]telemetry.Dim{{Name: "Route", Value: "POST /actions/{actionId}/consume"}, {Name: "Outcome", Value: "consumed"}},
		telemetry.Value{Name: "Requests", Unit: telemetry.Count, Value: 1},
		telemetry.Value{Name: "Latency", Unit: telemetry.Milliseconds, Value: 12.5})
	m.Emit([]telemetry.Dim{{Name: "Route", Value: "POST /actions/{actionId}/consume"}, {Name: "Outcome", Value: "consumed"}},
		telemetry.Value{Name: "Requests", Unit: telemetry.Count, Value: 1},
		telemetry.Value{Name: "Latency", Unit: telemetry.Milliseconds, Value: 7.5})
	m.Emit(nil, telemetry.Value{Name: "EventsPublished", Unit: telemetry.Count, Value: 3})

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines", len(lines))
	}
	for _, l := range lines {
		if err := testkit.ValidateEMF([]byte(l)); err != nil {
			t.Errorf("invalid EMF (%v): %s", err, l)
		}
	}
	var doc map[string]any
	json.Unmarshal([]byte(lines[0]), &doc)
	dir := doc["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
	if got := fmt.Sprint(dir["Dimensions"]); got != "[[Route] [Route Outcome]]" {
		t.Errorf("dimension sets %s, want per route and per route+outcome", got)
	}
	if doc["Namespace"] != nil || dir["Namespace"] != "ExactOnce" || doc["Latency"] != 12.5 || doc["Outcome"] != "consumed" {
		t.Errorf("document %s", lines[0])
	}
	if ts := int64(doc["_aws"].(map[string]any)["Timestamp"].(float64)); time.Since(time.UnixMilli(ts)) > time.Minute {
		t.Errorf("timestamp %d", ts)
	}

	totals := m.Totals()
	if len(totals) != 3 {
		t.Fatalf("totals %+v", totals)
	}
	for _, tot := range totals {
		if tot.Metric == "Latency" && (tot.Count != 2 || tot.Sum != 20 || tot.Max != 12.5 || tot.Dimensions["Outcome"] != "consumed") {
			t.Errorf("latency total %+v", tot)
		}
	}
	var nilMetrics *telemetry.Metrics
	nilMetrics.Emit(nil, telemetry.Value{Name: "x", Value: 1}) // records nothing, no panic
}

// TestValidateEMFRejects: the validator is not a rubber stamp.
func TestValidateEMFRejects(t *testing.T) {
	for _, bad := range []string{
		`{"Requests":1}`,
		`{"_aws":{"Timestamp":"now","CloudWatchMetrics":[]},"Requests":1}`,
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[["Route"]],"Metrics":[{"Name":"Requests"}]}]},"Requests":1}`,
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[[]],"Metrics":[{"Name":"Requests"}]}]},"Requests":"1"}`,
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[[]],"Metrics":[{"Name":"R","Unit":"Things"}]}]},"R":1}`,
	} {
		if testkit.ValidateEMF([]byte(bad)) == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestColdStartOnce(t *testing.T) {
	first := telemetry.ColdStart()
	if !first || telemetry.ColdStart() || telemetry.ColdStart() {
		t.Fatal("ColdStart must be true exactly once")
	}
}

// TestMeterDynamoDB: the middleware counts every attempt of a real SDK
// client (a throttled try and its retry are two), asks each write for its
// consumed capacity and adds what DynamoDB reports, counts a write refused
// by its condition (which reports none), and only in a metering context.
func TestMeterDynamoDB(t *testing.T) {
	var calls atomic.Int32
	var asked atomic.Value
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		body, _ := io.ReadAll(r.Body)
		switch n := calls.Add(1); {
		case n == 1:
			w.WriteHeader(400)
			w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"slow down"}`))
		case strings.HasSuffix(r.Header.Get("X-Amz-Target"), "UpdateItem") && strings.Contains(string(body), `"fail"`):
			w.WriteHeader(400)
			w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}`))
		case strings.HasSuffix(r.Header.Get("X-Amz-Target"), "UpdateItem"):
			asked.Store(string(body))
			w.Write([]byte(`{"ConsumedCapacity":{"TableName":"t","CapacityUnits":1.5}}`))
		default:
			w.Write([]byte(`{}`))
		}
	}))
	defer fake.Close()
	cfg := awsconfig.Local(fake.URL)
	cfg.Retryer = func() aws.Retryer { return retry.AddWithMaxBackoffDelay(retry.NewStandard(), time.Millisecond) }
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, telemetry.MeterDynamoDB) })
	key := map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: "a"}}
	get := &dynamodb.GetItemInput{TableName: aws.String("t"), Key: key}

	ctx, u := telemetry.WithUsage(context.Background())
	if _, err := db.GetItem(ctx, get); err != nil {
		t.Fatal(err)
	}
	if u.Requests() != 2 || calls.Load() != 2 {
		t.Fatalf("counted %d requests, server saw %d; want 2 (throttled + retry)", u.Requests(), calls.Load())
	}
	for _, id := range []string{"a", "fail"} {
		_, _ = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}},
			UpdateExpression: aws.String("SET #a = :a"), ConditionExpression: aws.String("attribute_exists(#a)"),
			ExpressionAttributeNames: map[string]string{"#a": "x"}, ExpressionAttributeValues: map[string]types.AttributeValue{":a": &types.AttributeValueMemberN{Value: "1"}}})
	}
	if u.WriteUnits() != 1.5 || u.FailedWrites() != 1 || u.Requests() != 4 {
		t.Fatalf("write units %v, failed writes %d, requests %d; want 1.5, 1, 4", u.WriteUnits(), u.FailedWrites(), u.Requests())
	}
	if b, _ := asked.Load().(string); !strings.Contains(b, `"ReturnConsumedCapacity":"TOTAL"`) {
		t.Fatalf("the write did not ask for its capacity: %s", b)
	}
	if _, err := db.GetItem(context.Background(), get); err != nil { // no Usage: nothing to count into
		t.Fatal(err)
	}
	if u.Requests() != 4 {
		t.Errorf("a call outside the context was counted")
	}
}
