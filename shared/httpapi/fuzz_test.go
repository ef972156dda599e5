package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/secretkeys"
	"github.com/exactonce/exactonce/shared/store"
)

// FuzzHandlers throws arbitrary path ids, bodies and Idempotency-Keys at the
// create, consume and cancel handlers. No input may crash a handler, every
// answer is a JSON object, and a request the handler refuses as invalid (400)
// or too large (413) must not have reached DynamoDB. The "DynamoDB" here
// refuses every request, so nothing is stored whatever happens.
func FuzzHandlers(f *testing.F) {
	var calls atomic.Int64
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(400)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"fuzz"}`))
	}))
	defer fake.Close()
	keys, err := secretkeys.ParseSecret("fuzz-secret-0123456789abcdefghijklmnop")
	if err != nil {
		f.Fatal(err)
	}
	api := New(store.New(dynamodb.NewFromConfig(awsconfig.Local(fake.URL)), "t", store.Options{}), secretkeys.StaticProvider(keys), slog.New(slog.NewJSONHandler(io.Discard, nil)))
	handlers := []Handler{api.Create, api.Consume, api.Cancel}

	f.Add(uint8(0), "", []byte(`{"userId":"u","pin":"1234","payload":{"a":[1]}}`), "", false)
	f.Add(uint8(0), "", []byte(`{"userId":"u","metadata":{"a":"b"},"expiresAt":"2030-01-01T00:00:00Z"}`), "key", false)
	f.Add(uint8(1), "a1", []byte(`{"reason":"r","pin":"1234"}`), "k", false)
	f.Add(uint8(1), "a1", []byte(``), "", false)
	f.Add(uint8(2), "a:b.c-d", []byte(`{"reason":"\u0000"}`), "", false)
	f.Add(uint8(2), "x", []byte(`eyJyZWFzb24iOiJyIn0=`), "", true)
	f.Add(uint8(0), "", []byte(`{"userId":"u","userId":"v"}`), "", false)
	f.Add(uint8(0), "", []byte("{\"userId\":\"\xff\"}"), "", false)

	f.Fuzz(func(t *testing.T, route uint8, id string, body []byte, key string, b64 bool) {
		ev := events.APIGatewayV2HTTPRequest{
			Headers:        map[string]string{},
			PathParameters: map[string]string{"actionId": id},
			Body:           string(body),
		}
		ev.RequestContext.RequestID = "fuzz"
		if b64 {
			ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		}
		if key != "" {
			ev.Headers["idempotency-key"] = key
		}
		before := calls.Load()
		resp, err := handlers[int(route)%len(handlers)](context.Background(), ev)
		if err != nil {
			t.Fatalf("handler returned an error: %v", err)
		}
		var out map[string]any
		if json.Unmarshal([]byte(resp.Body), &out) != nil {
			t.Fatalf("response is not a JSON object: %q", resp.Body)
		}
		reached := calls.Load() != before
		switch resp.StatusCode {
		case 400, 413:
			if reached {
				t.Fatalf("refused input reached DynamoDB: %d %s", resp.StatusCode, resp.Body)
			}
			if out["error"] == nil || out["message"] == nil {
				t.Fatalf("error body lacks error/message: %s", resp.Body)
			}
		default:
			if !reached {
				t.Fatalf("status %d without a DynamoDB request: %s", resp.StatusCode, resp.Body)
			}
			if out["error"] != string(action.CodeInternal) {
				t.Fatalf("unexpected answer from a refusing store: %d %s", resp.StatusCode, resp.Body)
			}
		}
	})
}
