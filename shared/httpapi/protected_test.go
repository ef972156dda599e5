package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
)

func TestPayload(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	const secret = "magic-link-token-7f3c"
	r := create(t, env, `{"actionId":"pl","userId":"u","payload":{"token":"`+secret+`","n":[1,2,{"x":null}]}}`)
	if strings.Contains(r.Raw, secret) {
		t.Fatal("create response shows the payload")
	}
	if g := do(t, env, "GET", "/actions/pl", ""); strings.Contains(g.Raw, secret) || g.Body["payload"] != nil {
		t.Fatalf("GET shows the payload: %s", g.Raw)
	}
	if strings.Contains(fmt.Sprint(rawItem(t, env, "pl")), secret) {
		t.Fatal("payload stored in clear")
	}
	c := do(t, env, "POST", "/actions/pl/consume", ``, "Idempotency-Key", "pk")
	if c.Status != 200 || !strings.Contains(c.Raw, `"payload":{"token":"`+secret+`","n":[1,2,{"x":null}]}`) {
		t.Fatalf("consume: %s", c.Raw)
	}
	again := do(t, env, "POST", "/actions/pl/consume", ``, "Idempotency-Key", "pk")
	if again.Raw != c.Raw || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %s", again.Raw)
	}
	if u := do(t, env, "POST", "/actions/pl/consume", ``); strings.Contains(u.Raw, secret) {
		t.Fatal("already_used shows the payload")
	}
	if strings.Contains(env.Log.String(), secret) {
		t.Fatal("the payload reached the logs")
	}
}

// TestPayloadTamper: a flipped ciphertext byte gives a 500-class error, never
// a wrong payload.
func TestPayloadTamper(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"tp","userId":"u","payload":"the real one"}`)
	sealed := rawItem(t, env, "tp")["payload"].(*types.AttributeValueMemberB).Value
	sealed[len(sealed)-3] ^= 0x40
	_, err := env.DB.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(env.Table), Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: "tp"}},
		UpdateExpression:          aws.String("SET payload = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberB{Value: sealed}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := do(t, env, "POST", "/actions/tp/consume", ``)
	if r.Status < 500 || r.Body["payload"] != nil || strings.Contains(r.Raw, "real") {
		t.Fatalf("tampered payload: %d %s", r.Status, r.Raw)
	}
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	body := `{"userId":"u","kind":"k","metadata":{"a":"1","b":"2"}}`
	first := do(t, env, "POST", "/actions", body, "Idempotency-Key", "create-1")
	expect(t, env, first, 201, "", update)
	// Same body, other key order and spacing: the canonical fingerprint matches.
	same := do(t, env, "POST", "/actions", ` { "metadata":{"b":"2","a":"1"}, "kind":"k", "userId":"u" } `, "Idempotency-Key", "create-1")
	expect(t, env, same, 201, "", update)
	if same.Raw != first.Raw || same.Header.Get("Idempotent-Replayed") != "true" || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("replay:\n%s\n%s", first.Raw, same.Raw)
	}
	expect(t, env, do(t, env, "POST", "/actions", `{"userId":"other"}`, "Idempotency-Key", "create-1"), 422, "idempotency_key_reused", update)

	// The replay is the first response even after the action was consumed.
	id := first.Str("actionId")
	expect(t, env, do(t, env, "POST", "/actions/"+id+"/consume", ``), 200, "", update)
	if later := do(t, env, "POST", "/actions", body, "Idempotency-Key", "create-1"); later.Raw != first.Raw {
		t.Fatalf("replay after consume changed:\n%s\n%s", first.Raw, later.Raw)
	}
	env.Counter.Take()

	// Explicit ids: another key or none on an existing id is action_exists.
	expect(t, env, do(t, env, "POST", "/actions", `{"actionId":"x","userId":"u"}`, "Idempotency-Key", "k-x"), 201, "", update)
	expect(t, env, do(t, env, "POST", "/actions", `{"actionId":"x","userId":"u"}`, "Idempotency-Key", "k-x"), 201, "", update)
	expect(t, env, do(t, env, "POST", "/actions", `{"actionId":"x","userId":"u"}`, "Idempotency-Key", "k-y"), 409, "action_exists", update)
	expect(t, env, do(t, env, "POST", "/actions", `{"actionId":"x","userId":"u"}`), 409, "action_exists", update)
}

func TestIdempotentConsumeAndCancel(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"ic","userId":"u"}`)
	first := do(t, env, "POST", "/actions/ic/consume", `{"reason":"r"}`, "Idempotency-Key", "c-1")
	expect(t, env, first, 200, "", update)
	again := do(t, env, "POST", "/actions/ic/consume", `{"reason":"r"}`, "Idempotency-Key", "c-1")
	expect(t, env, again, 200, "", update)
	if again.Raw != first.Raw || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("consume replay: %s", again.Raw)
	}
	r := do(t, env, "POST", "/actions/ic/consume", `{"reason":"other"}`, "Idempotency-Key", "c-1")
	expect(t, env, r, 422, "idempotency_key_reused", update)
	if r.Body["attemptsRemaining"] != nil {
		t.Errorf("422 without a PIN: %s, want no attemptsRemaining", r.Raw)
	}
	expect(t, env, do(t, env, "POST", "/actions/ic/consume", `{"reason":"r"}`, "Idempotency-Key", "c-2"), 409, "already_used", update)
	expect(t, env, do(t, env, "POST", "/actions/ic/consume", `{"reason":"r"}`), 409, "already_used", update)

	create(t, env, `{"actionId":"ix","userId":"u"}`)
	c1 := do(t, env, "POST", "/actions/ix/cancel", `{"reason":"r"}`, "Idempotency-Key", "x-1")
	expect(t, env, c1, 200, "", update)
	c2 := do(t, env, "POST", "/actions/ix/cancel", `{"reason":"r"}`, "Idempotency-Key", "x-1")
	expect(t, env, c2, 200, "", update)
	if c2.Raw != c1.Raw || c2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("cancel replay: %s", c2.Raw)
	}
	expect(t, env, do(t, env, "POST", "/actions/ix/cancel", `{"reason":"changed"}`, "Idempotency-Key", "x-1"), 422, "idempotency_key_reused", update)
	// Consuming a canceled action stays 410 whatever the key.
	expect(t, env, do(t, env, "POST", "/actions/ix/consume", ``, "Idempotency-Key", "x-1"), 410, "canceled", update)
}
