package httpapi_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
)

// TestSecretsStayOutOfFailurePaths drives every route that carries a secret
// (a PIN, a payload, an Idempotency-Key, a hosted key's name, token,
// fingerprint and response) through its failure paths: DynamoDB down for
// every operation (503 after the SDK's retries), a write whose answer is
// lost (the SDK re-sends it), and the refusals that compare a secret (422,
// 409, 403). Whatever was printed (request lines, warnings, EMF metrics,
// the published events) and every error answer must hold none of those
// secrets, nor an unkeyed digest or encoding of one.
func TestSecretsStayOutOfFailurePaths(t *testing.T) {
	t.Parallel()
	p, err := faults.Start(testkit.DynamoDB(t), faults.Rates{}, 1, "UpdateItem", "GetItem") // the routes' operations
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	events := &testkit.SyncBuffer{}
	env := testkit.NewEnv(t, func(o *server.Options) {
		o.AWS.BaseEndpoint = aws.String(p.URL)
		o.Events, o.EventLog = true, events
	})

	const (
		pin      = "pin-Qz8-failpath"
		payload  = "payload-failpath-7d1e"
		idem     = "idem-failpath-91c2"
		keyName  = "hosted-failpath-key"
		fp       = "fp-failpath-sha-4be0"
		response = "resp-failpath-ch_77"
	)
	var answers []string
	call := func(method, path, body string, headers ...string) *testkit.Response {
		t.Helper()
		r := do(t, env, method, path, body, headers...)
		if r.Status >= 400 {
			answers = append(answers, r.Raw)
		}
		return r
	}
	want := func(r *testkit.Response, status int, what string) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("%s: %d %s, want %d", what, r.Status, r.Raw, status)
		}
	}

	// DynamoDB down: every keyed route answers 503.
	p.Down(true)
	want(call("POST", "/actions", `{"userId":"u","pin":"`+pin+`","payload":{"s":"`+payload+`"}}`, "Idempotency-Key", idem), 503, "create while down")
	want(call("POST", "/keys/"+keyName+"/claim", `{"fingerprint":"`+fp+`"}`, "Idempotency-Key", idem+"-c"), 503, "claim while down")
	want(call("GET", "/keys/"+keyName, ""), 503, "get key while down")
	p.Down(false)

	// The same calls again, now served; the create's write loses its answer
	// once (the SDK re-sends it and finds its own write).
	p.PassThenDrop(0, 1)
	cr := call("POST", "/actions", `{"userId":"u","pin":"`+pin+`","payload":{"s":"`+payload+`"}}`, "Idempotency-Key", idem)
	want(cr, 201, "create")
	id := cr.Str("actionId")
	cl := call("POST", "/keys/"+keyName+"/claim", `{"fingerprint":"`+fp+`"}`, "Idempotency-Key", idem+"-c")
	want(cl, 201, "claim")
	token := cl.Str("token")

	// Refusals that compare a secret.
	want(call("POST", "/actions", `{"userId":"u2","pin":"`+pin+`"}`, "Idempotency-Key", idem), 422, "create key reused")
	want(call("POST", "/keys/"+keyName+"/claim", `{"fingerprint":"`+fp+`-other"}`), 422, "claim other fingerprint")
	want(call("POST", "/keys/"+keyName+"/claim", `{"fingerprint":"`+fp+`"}`), 409, "claim held")
	want(call("POST", "/actions/"+id+"/consume", `{"pin":"`+pin+`-wrong"}`, "Idempotency-Key", idem+"-w"), 403, "wrong PIN")

	// Completing and consuming while DynamoDB is down, then for real; the
	// complete's write loses its answer once.
	p.Down(true)
	want(call("POST", "/keys/"+keyName+"/complete", `{"token":"`+token+`","response":{"charge":"`+response+`"}}`), 503, "complete while down")
	want(call("POST", "/actions/"+id+"/consume", `{"pin":"`+pin+`"}`, "Idempotency-Key", idem+"-k"), 503, "consume while down")
	p.Down(false)
	p.PassThenDrop(0, 1)
	want(call("POST", "/keys/"+keyName+"/complete", `{"token":"`+token+`","response":{"charge":"`+response+`"}}`), 200, "complete")
	want(call("POST", "/actions/"+id+"/consume", `{"pin":"`+pin+`"}`, "Idempotency-Key", idem+"-k"), 200, "consume")
	want(call("POST", "/keys/"+keyName+"/release", `{"token":"`+token+`"}`), 409, "release completed")
	want(call("POST", "/actions/"+id+"/consume", `{"pin":"`+pin+`"}`), 409, "consume again")
	env.Settled(t)

	secrets := map[string]string{
		"PIN": pin, "payload": payload, "Idempotency-Key": idem, "hosted key name": keyName,
		"hosted key fingerprint": fp, "hosted key response": response, "hosted key token": token,
		"server secret": "test-secret-0123456789",
	}
	printed := env.Log.String() + events.String()
	if !strings.Contains(printed, `"msg":"dependency unavailable"`) || !strings.Contains(events.String(), "action.consumed") {
		t.Fatalf("the failure paths were not taken, or no event was published:\n%s", printed)
	}
	for what, s := range secrets {
		forms := []string{s, base64.StdEncoding.EncodeToString([]byte(s)), base64.RawURLEncoding.EncodeToString([]byte(s)), hex.EncodeToString([]byte(s))}
		sum := sha256.Sum256([]byte(s))
		forms = append(forms, hex.EncodeToString(sum[:6]), base64.RawURLEncoding.EncodeToString(sum[:9]))
		for _, f := range forms {
			if strings.Contains(printed, f) {
				t.Errorf("the log, metrics or events hold the %s (as %q)", what, f)
			}
			for _, a := range answers {
				if strings.Contains(a, f) {
					t.Errorf("an error answer holds the %s (as %q): %s", what, f, a)
				}
			}
		}
	}
}
