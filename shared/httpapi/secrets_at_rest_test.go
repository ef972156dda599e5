package httpapi_test

// Nothing secret can be recomputed from the table or the logs without the
// server secret.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/dynamostore"
	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/store"
)

// TestNoDigestWithoutSecret reads the raw items and the logs and tries what
// an attacker with a table read (or a stream image, a backup, the logs)
// would: hash every 4-digit PIN and every 6-digit payload the way an
// unkeyed fingerprint would, and look for the result. Before the fix the
// consume fingerprint was SHA-256 of {"pin":"4821"} and fell out after
// 4,822 hashes; the logs held SHA-256 prefixes of the Idempotency-Keys.
func TestNoDigestWithoutSecret(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	const key = "order-42"
	create(t, env, `{"actionId":"d1","userId":"u","pin":"4821","payload":"583920"}`, "Idempotency-Key", key)
	if r := do(t, env, "POST", "/actions/d1/consume", `{"pin":"4821"}`, "Idempotency-Key", key+"-c"); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	do(t, env, "POST", "/actions", `{"actionId":"d2","userId":"u","payload":"583920"}`)
	do(t, env, "POST", "/actions/d2/cancel", `{"reason":"x"}`, "Idempotency-Key", key+"-x")
	do(t, env, "POST", "/keys/job-7/claim", `{"fingerprint":"f"}`, "Idempotency-Key", key+"-k")

	// Every value stored on the items, as text (hex for binary).
	var stored []string
	for _, id := range []string{"d1", "d2", "key#job-7"} {
		for name, v := range rawItem(t, env, id) {
			switch v := v.(type) {
			case *types.AttributeValueMemberS:
				stored = append(stored, v.Value)
			case *types.AttributeValueMemberB:
				stored = append(stored, hex.EncodeToString(v.Value))
			}
			stored = append(stored, name)
		}
	}
	all := strings.Join(stored, "\n") + "\n" + env.Log.String()
	for _, k := range []string{key, key + "-c", key + "-x", key + "-k"} {
		if strings.Contains(strings.Join(stored, "\n"), k+"\n") {
			t.Errorf("an Idempotency-Key is stored as sent: %q", k)
		}
		sum := sha256.Sum256([]byte(k))
		if strings.Contains(all, hex.EncodeToString(sum[:6])) {
			t.Errorf("an unkeyed hash of key %q is stored or logged", k)
		}
	}
	tries := 0
	guess := func(body string) {
		tries++
		sum := sha256.Sum256(canonical(t, body))
		if h := hex.EncodeToString(sum[:]); strings.Contains(all, h) {
			t.Fatalf("after %d hashes an unkeyed digest gives the secret away: %s", tries, body)
		}
	}
	for pin := range 10000 {
		guess(fmt.Sprintf(`{"pin":"%04d"}`, pin))
		guess(fmt.Sprintf(`{"actionId":"d1","pin":"%04d","payload":"583920","userId":"u"}`, pin))
	}
	for p := range 1000000 {
		if p%10 == 0 || p == 583920 { // every tenth payload and the real one: enough to show it
			guess(fmt.Sprintf(`{"actionId":"d2","payload":"%06d","userId":"u"}`, p))
		}
	}
	guess(`{"reason":"x"}`)
	guess(`{"fingerprint":"f"}`)
	t.Logf("%d unkeyed guesses, none found in %d stored values or the log", tries, len(stored))
}

func canonical(t *testing.T, body string) []byte {
	v := jsontext.Value(body)
	if err := v.Canonicalize(); err != nil {
		t.Fatal(err)
	}
	return v
}

// storedValues is every string (and hex of every binary) value of an item.
func storedValues(item map[string]types.AttributeValue) []string {
	var out []string
	for _, v := range item {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			out = append(out, v.Value)
		case *types.AttributeValueMemberB:
			out = append(out, hex.EncodeToString(v.Value))
		}
	}
	return out
}

// TestHostedKeyTokenAndResponseAreNotStored reads a hosted key's item as a
// table reader would (a stream image, a backup, read-only access) and tries
// what such a reader can do with it. Before the fix the item held the
// holder's fencing token and the stored response as sent: the reader
// completed another caller's key with a response of its own, and read the
// card number its holder stored.
func TestHostedKeyTokenAndResponseAreNotStored(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	const secret = "4111111111111111"

	first := claim(t, env, "pay-9", `{"fingerprint":"f"}`)
	token := first.Str("token")
	if first.Status != 201 || len(token) != 32 {
		t.Fatalf("claim: %s", first.Raw)
	}
	for _, v := range storedValues(rawItem(t, env, "key#pay-9")) {
		if strings.Contains(v, token) {
			t.Errorf("the holder's token is stored: %q", v)
		}
		// The reader tries every stored value as the token.
		r := do(t, env, "POST", "/keys/pay-9/complete", `{"token":"`+v+`","response":{"forged":true}}`)
		if r.Status == 200 {
			t.Fatalf("a stored value completed the key: %q", v)
		}
	}
	if r := do(t, env, "POST", "/keys/pay-9/complete", `{"token":"`+token+`","response":{"card":"`+secret+`"}}`); r.Status != 200 {
		t.Fatalf("complete: %s", r.Raw)
	}
	if r := claim(t, env, "pay-9", `{"fingerprint":"f"}`); r.Status != 200 || !strings.Contains(r.Raw, `"response":{"card":"`+secret+`"}`) {
		t.Fatalf("replay: %s", r.Raw)
	}
	// A retried claim gets its own token back, still not stored.
	mine := claim(t, env, "job-3", `{"fingerprint":"f"}`, "Idempotency-Key", "c-3")
	again := claim(t, env, "job-3", `{"fingerprint":"f"}`, "Idempotency-Key", "c-3")
	if mine.Status != 201 || again.Status != 201 || again.Str("token") != mine.Str("token") {
		t.Fatalf("retried claim: %s / %s", mine.Raw, again.Raw)
	}
	if r := do(t, env, "POST", "/keys/job-3/release", `{"token":"`+again.Str("token")+`","error":"declined"}`); r.Status != 200 {
		t.Fatalf("release with the replayed token: %s", r.Raw)
	}
	for _, id := range []string{"key#pay-9", "key#job-3"} {
		for _, v := range storedValues(rawItem(t, env, id)) {
			if strings.Contains(v, secret) || strings.Contains(v, token) || strings.Contains(v, mine.Str("token")) {
				t.Errorf("%s stores a secret: %q", id, v)
			}
		}
	}
}

// TestHostedKeyFingerprintIsNotStored: DESIGN.md, "every digest that is
// stored or logged (request fingerprints, key hashes) is keyed by the server
// secret". A claim's fingerprint is often a digest of the effect's
// parameters taken without a key (docs/http-api.md's example:
// "sha256:9f2c"): the item keeps it keyed and bound to the key, never as
// sent, and the same fingerprint still replays while another is refused.
func TestHostedKeyFingerprintIsNotStored(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	sum := sha256.Sum256([]byte("card=4111111111111111&amount=981"))
	fp := "sha256:" + hex.EncodeToString(sum[:])
	body := `{"fingerprint":"` + fp + `"}`
	for _, key := range []string{"pay-1", "pay-2"} {
		c := claim(t, env, key, body)
		if c.Status != 201 {
			t.Fatalf("claim %s: %d %s", key, c.Status, c.Raw)
		}
		if r := do(t, env, "POST", "/keys/"+key+"/complete", `{"token":"`+c.Str("token")+`","response":1}`); r.Status != 200 {
			t.Fatalf("complete %s: %s", key, r.Raw)
		}
	}
	one, two := rawItem(t, env, "key#pay-1"), rawItem(t, env, "key#pay-2")
	for _, item := range []map[string]types.AttributeValue{one, two} {
		for _, v := range storedValues(item) {
			if strings.Contains(v, hex.EncodeToString(sum[:])) {
				t.Errorf("the claim's fingerprint is stored as sent: %q", v)
			}
		}
	}
	if a, b := one["fingerprint"].(*types.AttributeValueMemberS), two["fingerprint"].(*types.AttributeValueMemberS); a.Value == b.Value {
		t.Errorf("one fingerprint on two keys is stored the same (%q): a table read tells which keys share parameters", a.Value)
	}
	if r := claim(t, env, "pay-1", body); r.Status != 200 || r.Body["response"] != 1.0 {
		t.Fatalf("the same fingerprint again: %d %s, want the replay", r.Status, r.Raw)
	}
	if r := claim(t, env, "pay-1", `{"fingerprint":"sha256:other"}`); r.Status != 422 || r.Str("error") != "fingerprint_mismatch" {
		t.Fatalf("another fingerprint: %d %s, want 422 fingerprint_mismatch", r.Status, r.Raw)
	}
	// A table reader sending the stored value back gets nothing: it is no
	// fingerprint of its own (before, it replayed the key's response).
	stored := one["fingerprint"].(*types.AttributeValueMemberS).Value
	if r := claim(t, env, "pay-1", `{"fingerprint":"`+stored+`"}`); r.Status != 422 || r.Str("error") != "fingerprint_mismatch" {
		t.Fatalf("the stored fingerprint sent back: %d %s, want 422 fingerprint_mismatch", r.Status, r.Raw)
	}
}

// TestHostedKeysStoredInClearStillWork: keys written before tokens and
// responses were kept out of the item (token and response as sent) finish
// their lifecycle after an upgrade: their holders complete or release with
// the tokens they hold, and a completed one replays its response.
func TestHostedKeysStoredInClearStillWork(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	old := &dynamostore.Table{DB: env.DB, Name: env.Table, PartitionKey: "actionId", Prefix: store.KeyPrefix}
	ctx, now := context.Background(), time.Now()
	claimOld := func(name string) string {
		tok := idempotency.NewToken()
		if _, err := old.Claim(ctx, name, idempotency.Claim{Fingerprint: "f", Lease: time.Minute, Token: tok, Now: now}); err != nil {
			t.Fatal(err)
		}
		return tok
	}
	done := claimOld("old-done")
	if _, err := old.Complete(ctx, "old-done", done, []byte(`{"charge":"ch_1"}`), now); err != nil {
		t.Fatal(err)
	}
	if r := claim(t, env, "old-done", `{"fingerprint":"f"}`); r.Status != 200 || !strings.Contains(r.Raw, `"response":{"charge":"ch_1"}`) {
		t.Fatalf("replay of a response stored as sent: %s", r.Raw)
	}
	if r := claim(t, env, "old-done", `{"fingerprint":"g"}`); r.Status != 422 || r.Str("error") != "fingerprint_mismatch" {
		t.Fatalf("another fingerprint on a key whose fingerprint was stored as sent: %d %s", r.Status, r.Raw)
	}
	held := claimOld("old-held")
	if r := do(t, env, "POST", "/keys/old-held/complete", `{"token":"`+idempotency.NewToken()+`","response":1}`); r.Status != 409 {
		t.Fatalf("another token completed an old key: %s", r.Raw)
	}
	if r := do(t, env, "POST", "/keys/old-held/complete", `{"token":"`+held+`","response":{"n":2}}`); r.Status != 200 {
		t.Fatalf("complete with an old key's token: %s", r.Raw)
	}
	if r := claim(t, env, "old-held", `{"fingerprint":"f"}`); r.Status != 200 || !strings.Contains(r.Raw, `"response":{"n":2}`) {
		t.Fatalf("replay: %s", r.Raw)
	}
	failed := claimOld("old-failed")
	if r := do(t, env, "POST", "/keys/old-failed/release", `{"token":"`+failed+`"}`); r.Status != 200 {
		t.Fatalf("release with an old key's token: %s", r.Raw)
	}
	if r := do(t, env, "POST", "/keys/old-failed/release", `{"token":"`+failed+`"}`); r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("release again: %d %s", r.Status, r.Raw)
	}
}

// setAttr writes one attribute of an item as a table writer would (v nil:
// removes it).
func setAttr(t *testing.T, env *testkit.Env, pk, attr string, v types.AttributeValue) {
	t.Helper()
	in := &dynamodb.UpdateItemInput{
		TableName:                aws.String(env.Table),
		Key:                      map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: pk}},
		UpdateExpression:         aws.String("SET #a = :v"),
		ExpressionAttributeNames: map[string]string{"#a": attr},
	}
	if v == nil {
		in.UpdateExpression = aws.String("REMOVE #a")
	} else {
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": v}
	}
	if _, err := env.DB.UpdateItem(context.Background(), in); err != nil {
		t.Fatal(err)
	}
}

// mustStatus checks an answer's status and error code.
func mustStatus(t *testing.T, what string, r *testkit.Response, status int, code string) {
	t.Helper()
	if r.Status != status || (code != "" && r.Str("error") != code) {
		t.Errorf("%s: got %d %s, want %d %s", what, r.Status, strings.TrimSpace(r.Raw), status, code)
	}
}

// TestKeyTokenHoldsOnlyItsKey: a token completes or releases only the key
// (and tenant) whose claim made it; nothing built from what a table reader
// sees (the stored nonce, alone or padded, halves of two tokens) completes
// a key, nor does a nonce a table writer copies onto another key.
func TestKeyTokenHoldsOnlyItsKey(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	a := claim(t, env, "a", `{"fingerprint":"f"}`).Str("token")
	b := claim(t, env, "b", `{"fingerprint":"f"}`).Str("token")
	env.Counter.Take()

	mustStatus(t, "A's token on B", do(t, env, "POST", "/keys/b/complete", `{"token":"`+a+`","response":1}`), 409, "lease_lost")
	mustStatus(t, "upper-case", do(t, env, "POST", "/keys/a/complete", `{"token":"`+strings.ToUpper(a)+`","response":1}`), 400, "invalid_request") // the Token schema: lower-case hex
	mustStatus(t, "whitespace", do(t, env, "POST", "/keys/a/complete", `{"token":" `+a[:31]+`","response":1}`), 400, "invalid_request")
	mustStatus(t, "trailing nl", do(t, env, "POST", "/keys/a/complete", `{"token":"`+a+`\n","response":1}`), 400, "invalid_request")
	// What a table reader sees, in every shape.
	stored := rawItem(t, env, "key#a")["token"].(*types.AttributeValueMemberS).Value
	nonce := strings.TrimPrefix(stored, "n:")
	for _, tok := range []string{stored, nonce, nonce + nonce, nonce + strings.Repeat("0", 16), strings.Repeat("0", 16) + nonce, a[:16] + b[16:]} {
		r := do(t, env, "POST", "/keys/a/complete", `{"token":"`+tok+`","response":{"forged":1}}`)
		if r.Status == 200 {
			t.Errorf("stored-derived token %q completed: %s", tok, r.Raw)
		}
	}
	// A writer copies A's stored token onto B; A's holder tries B.
	setAttr(t, env, "key#b", "token", &types.AttributeValueMemberS{Value: stored})
	mustStatus(t, "A's token on B with A's nonce", do(t, env, "POST", "/keys/b/complete", `{"token":"`+a+`","response":1}`), 409, "lease_lost")
	mustStatus(t, "A", do(t, env, "POST", "/keys/a/complete", `{"token":"`+a+`","response":1}`), 200, "")

	tenv := testkit.NewEnv(t, withTenants)
	al := as(t, tenv, alpha, "POST", "/keys/k/claim", `{"fingerprint":"f"}`).Str("token")
	be := as(t, tenv, beta, "POST", "/keys/k/claim", `{"fingerprint":"f"}`).Str("token")
	if len(al) != 32 || len(be) != 32 {
		t.Fatal("tenant claims")
	}
	mustStatus(t, "alpha's token on beta", as(t, tenv, beta, "POST", "/keys/k/complete", `{"token":"`+al+`","response":1}`), 409, "lease_lost")
	mustStatus(t, "beta's token on alpha", as(t, tenv, alpha, "POST", "/keys/k/release", `{"token":"`+be+`"}`), 409, "lease_lost")
	mustStatus(t, "beta", as(t, tenv, beta, "POST", "/keys/k/complete", `{"token":"`+be+`","response":1}`), 200, "")
}

// TestSealedResponseReplaysOnlyOnItsKey: a sealed response that a table
// writer moves onto another key's item (of its tenant or another) is never
// replayed there (500), nor is a damaged one.
func TestSealedResponseReplaysOnlyOnItsKey(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, withTenants)
	complete := func(who, key, resp string) {
		t.Helper()
		tok := as(t, env, who, "POST", "/keys/"+key+"/claim", `{"fingerprint":"f"}`).Str("token")
		if r := as(t, env, who, "POST", "/keys/"+key+"/complete", `{"token":"`+tok+`","response":`+resp+`}`); r.Status != 200 {
			t.Fatalf("complete %s: %s", key, r.Raw)
		}
	}
	complete(alpha, "src", `{"secret":"SRC"}`)
	complete(alpha, "dst", `{"mine":"DST"}`)
	complete(beta, "dst", `{"mine":"BETA"}`)
	src := rawItem(t, env, "key#t#alpha#src")["response"]
	if s := src.(*types.AttributeValueMemberS).Value; !strings.HasPrefix(s, "~") || strings.Contains(s, "SRC") {
		t.Fatalf("stored response: %q", s)
	}
	setAttr(t, env, "key#t#alpha#dst", "response", src)
	setAttr(t, env, "key#t#beta#dst", "response", src)
	for _, c := range []struct{ who, key string }{{alpha, "dst"}, {beta, "dst"}} {
		r := as(t, env, c.who, "POST", "/keys/"+c.key+"/claim", `{"fingerprint":"f"}`)
		if strings.Contains(r.Raw, "SRC") || (r.Status != 500 && r.Status != 503) {
			t.Errorf("swapped response replayed for %s: %d %s", c.key, r.Status, r.Raw)
		}
		t.Logf("%s/%s: %d %s", c.who, c.key, r.Status, strings.TrimSpace(r.Raw))
	}
	// Truncated / bit-flipped / not-base64 sealed forms.
	s := src.(*types.AttributeValueMemberS).Value
	for _, bad := range []string{"~", "~!!", s[:len(s)-4], "~" + strings.Repeat("A", 40)} {
		setAttr(t, env, "key#t#alpha#src", "response", &types.AttributeValueMemberS{Value: bad})
		r := as(t, env, alpha, "POST", "/keys/src/claim", `{"fingerprint":"f"}`)
		if r.Status != 500 && r.Status != 503 {
			t.Errorf("tampered %q: %d %s", bad, r.Status, r.Raw)
		}
	}
}

// TestErrorAnswersNameNoSecretMember: a 400 names the member at fault by
// its path, but the member names inside a payload (or a key's response)
// are part of that secret: the path stops at "payload" ("response"). It
// named them (payload.<name>) for invalid UTF-8, a duplicate name and
// nesting too deep. A duplicated payload member itself is still named.
func TestErrorAnswersNameNoSecretMember(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	const secret = "CANARY-NAME-7f3"
	tok := claim(t, env, "job", `{"fingerprint":"f"}`).Str("token")
	deep := strings.Repeat(`[`, 10000) + strings.Repeat(`]`, 10000)
	for _, c := range []struct{ path, body, field, message string }{
		{"/actions", `{"userId":"u","payload":{"` + secret + `":"x` + "\xff" + `"}}`, "payload", "payload contains invalid UTF-8"},
		{"/actions", `{"userId":"u","payload":{"` + secret + `":1,"` + secret + `":2}}`, "payload", "payload has a member that appears more than once"},
		{"/actions", `{"userId":"u","payload":{"` + secret + `":` + deep + `}}`, "payload", "payload is nested too deeply"},
		{"/actions", `{"userId":"u","payload":{"a":{"` + secret + `":"x` + "\xff" + `"}}}`, "payload", "payload contains invalid UTF-8"},
		{"/actions", `{"userId":"u","payload":1,"payload":2}`, "payload", "payload appears more than once"},
		{"/keys/job/complete", `{"token":"` + tok + `","response":{"` + secret + `":"x` + "\xff" + `"}}`, "response", "response contains invalid UTF-8"},
		{"/keys/job/complete", `{"token":"` + tok + `","response":{"` + secret + `":1,"` + secret + `":2}}`, "response", "response has a member that appears more than once"},
	} {
		r := do(t, env, "POST", c.path, c.body)
		if r.Status != 400 || r.Str("field") != c.field || r.Str("message") != c.message || strings.Contains(r.Raw, secret) {
			t.Errorf("POST %s: %d %s, want 400 naming %s: %q", c.path, r.Status, strings.TrimSpace(r.Raw), c.field, c.message)
		}
	}
}
