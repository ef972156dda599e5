package httpapi_test

// Nothing secret can be recomputed from the table or the logs without the
// server secret.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/exactonce/exactonce/internal/testkit"
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
