package httpapi_test

// Replays answer only the same request, with exactly what was stored.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestRequestIDReplayNeedsSameBody: a consume event re-sent with the request
// id of a committed consume (request ids are in the logs) but another body
// must not get the 200 and the payload. Before the fix the request id was
// trusted before the body.
func TestRequestIDReplayNeedsSameBody(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"ri","userId":"u","pin":"2468","payload":"s3cret"}`)
	ev := func(body string) events.APIGatewayV2HTTPRequest {
		var e events.APIGatewayV2HTTPRequest
		e.RequestContext.RequestID = "req-fixed-1"
		e.PathParameters = map[string]string{"actionId": "ri"}
		e.Headers = map[string]string{"content-type": "application/json"}
		e.Body = body
		return e
	}
	first, _ := env.API.Consume(context.Background(), ev(`{"pin":"2468"}`))
	if first.StatusCode != 200 {
		t.Fatal(first.Body)
	}
	again, _ := env.API.Consume(context.Background(), ev(`{"pin":"2468"}`))
	if again.StatusCode != 200 || again.Body != first.Body {
		t.Fatalf("the same event re-sent: %d %s", again.StatusCode, again.Body)
	}
	for _, body := range []string{`{"pin":"0000"}`, `{}`, `{"reason":"other"}`} {
		r, _ := env.API.Consume(context.Background(), ev(body))
		if r.StatusCode == 200 || strings.Contains(r.Body, "s3cret") {
			t.Fatalf("request id with body %s: %d %s", body, r.StatusCode, r.Body)
		}
	}
}

// TestClaimTokenOnlyForSameRequest: a claim with the holder's
// Idempotency-Key but another body must not get the live token. Before the
// fix it got 201 with the first holder's token.
func TestClaimTokenOnlyForSameRequest(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	first := do(t, env, "POST", "/keys/job-1/claim", `{"fingerprint":"f","leaseSeconds":60}`, "Idempotency-Key", "cl-1")
	if first.Status != 201 || first.Str("token") == "" {
		t.Fatal(first.Raw)
	}
	other := do(t, env, "POST", "/keys/job-1/claim", `{"fingerprint":"f","leaseSeconds":30}`, "Idempotency-Key", "cl-1")
	if other.Status != 409 || other.Str("error") != "in_progress" || strings.Contains(other.Raw, first.Str("token")) {
		t.Fatalf("same key, other body: %d %s", other.Status, other.Raw)
	}
	retry := do(t, env, "POST", "/keys/job-1/claim", `{"fingerprint":"f","leaseSeconds":60}`, "Idempotency-Key", "cl-1")
	if retry.Status != 201 || retry.Str("token") != first.Str("token") || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the holder's own retry: %d %s", retry.Status, retry.Raw)
	}
}

// TestEmptyJSONValuesReplayExactly: empty JSON values ({}, [], "", null, 0,
// false) are values: a payload or a /keys response holding one is answered
// and replayed exactly as stored.
func TestEmptyJSONValuesReplayExactly(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	for i, v := range []string{`{}`, `[]`, `""`, `null`, `0`, `false`} {
		id := fmt.Sprintf("e%d", i)
		create(t, env, `{"actionId":"`+id+`","userId":"u","payload":`+v+`}`)
		c := do(t, env, "POST", "/actions/"+id+"/consume", ``, "Idempotency-Key", "k"+id)
		again := do(t, env, "POST", "/actions/"+id+"/consume", ``, "Idempotency-Key", "k"+id)
		for _, got := range []*testkit.Response{c, again} {
			if got.Status != 200 || !strings.Contains(got.Raw, `"payload":`+v) {
				t.Errorf("payload %s: %d %s", v, got.Status, got.Raw)
			}
		}
		k := do(t, env, "POST", "/keys/"+id+"/claim", `{"fingerprint":"f"}`)
		do(t, env, "POST", "/keys/"+id+"/complete", `{"token":"`+k.Str("token")+`","response":`+v+`}`)
		replay := do(t, env, "POST", "/keys/"+id+"/claim", `{"fingerprint":"f"}`)
		if replay.Status != 200 || !strings.Contains(replay.Raw, `"response":`+v) {
			t.Errorf("key response %s: %d %s", v, replay.Status, replay.Raw)
		}
	}
}

// TestKeyedCreateReplaysAfterExpiresAt: a create retried with its key after
// its expiresAt has passed replays its 201; without a matching create the
// same body is still the 400 it always was.
func TestKeyedCreateReplaysAfterExpiresAt(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	body := `{"userId":"u","expiresAt":"` + time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano) + `"}`
	first := do(t, env, "POST", "/actions", body, "Idempotency-Key", "late-1")
	env.Shift(time.Hour)
	env.Counter.Take()
	late := do(t, env, "POST", "/actions", body, "Idempotency-Key", "late-1")
	expect(t, env, late, 201, "", get)
	if late.Raw != first.Raw || late.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("late retry: %s, first: %s", late.Raw, first.Raw)
	}
	// Without a matching create it is still the 400 it always was.
	r := do(t, env, "POST", "/actions", body, "Idempotency-Key", "late-2")
	expect(t, env, r, 400, "invalid_request", get)
	r = do(t, env, "POST", "/actions", body)
	expect(t, env, r, 400, "invalid_request", none)
}
