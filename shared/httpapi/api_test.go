package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// client keeps enough connections open for the race tests.
var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}

func do(t *testing.T, env *testkit.Env, method, path, body string, headers ...string) *testkit.Response {
	t.Helper()
	return testkit.Do(t, client, method, env.URL+path, body, headers...)
}

// expect checks status and error code, and that the call cost exactly the
// DynamoDB requests listed (operation → count; nil skips the count).
func expect(t *testing.T, env *testkit.Env, r *testkit.Response, status int, code string, ddb map[string]int) {
	t.Helper()
	if r.Status != status || r.Str("error") != code {
		t.Fatalf("got %d %s, want %d %q", r.Status, r.Raw, status, code)
	}
	if code != "" {
		if r.Header.Get("Content-Type") != "application/json" || r.Str("message") == "" || r.Str("requestId") == "" {
			t.Fatalf("error body lacks content type, message or requestId: %s", r.Raw)
		}
	}
	got := env.Counter.Take()
	if ddb != nil && fmt.Sprint(got) != fmt.Sprint(ddb) {
		t.Fatalf("DynamoDB requests = %v, want %v", got, ddb)
	}
}

var (
	none   = map[string]int{}
	update = map[string]int{"UpdateItem": 1}
	get    = map[string]int{"GetItem": 1}

	twoUpdates = map[string]int{"UpdateItem": 2}
)

func create(t *testing.T, env *testkit.Env, body string, headers ...string) *testkit.Response {
	t.Helper()
	r := do(t, env, "POST", "/actions", body, headers...)
	if r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	env.Counter.Take()
	return r
}

func TestCreateAndGet(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	r := do(t, env, "POST", "/actions", `{"actionId":"a1","userId":"u1","kind":"coupon","metadata":{"campaign":"bf"}}`)
	expect(t, env, r, 201, "", update)
	for k, want := range map[string]string{"actionId": "a1", "userId": "u1", "kind": "coupon", "state": "active"} {
		if r.Str(k) != want {
			t.Errorf("%s = %q, want %q", k, r.Str(k), want)
		}
	}
	created, _ := time.Parse(time.RFC3339, r.Str("createdAt"))
	expires, _ := time.Parse(time.RFC3339, r.Str("expiresAt"))
	if expires.Sub(created) != 24*time.Hour || !strings.HasSuffix(r.Str("createdAt"), "Z") || len(r.Str("createdAt")) != 24 {
		t.Errorf("times: created %s expires %s", r.Str("createdAt"), r.Str("expiresAt"))
	}

	g := do(t, env, "GET", "/actions/a1", "")
	expect(t, env, g, 200, "", get)
	if g.Raw != r.Raw {
		t.Errorf("GET differs from create:\n%s\n%s", g.Raw, r.Raw)
	}
	expect(t, env, do(t, env, "GET", "/actions/nope", ""), 404, "action_not_found", get)
	expect(t, env, do(t, env, "POST", "/actions", `{"actionId":"a1","userId":"u2"}`), 409, "action_exists", update)

	gen := do(t, env, "POST", "/actions", `{"userId":"u1"}`)
	expect(t, env, gen, 201, "", update)
	if id := gen.Str("actionId"); len(id) != 32 {
		t.Errorf("generated id %q", id)
	}
	pending := do(t, env, "POST", "/actions", `{"userId":"u1","activeAt":"`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}`)
	expect(t, env, pending, 201, "", update)
	if pending.Str("state") != "pending" {
		t.Errorf("state = %s, want pending", pending.Str("state"))
	}
}

// TestOutcomes drives every consume and cancel outcome, each against the
// embedded store, and checks each costs exactly one DynamoDB request.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	create(t, env, `{"actionId":"consumed","userId":"u"}`)
	first := do(t, env, "POST", "/actions/consumed/consume", `{"reason":"first"}`)
	expect(t, env, first, 200, "", update)
	if first.Str("state") != "consumed" || first.Str("consumedReason") != "first" || first.Str("consumedAt") == "" {
		t.Fatalf("consume body: %s", first.Raw)
	}
	create(t, env, `{"actionId":"canceled","userId":"u"}`)
	c := do(t, env, "POST", "/actions/canceled/cancel", `{"reason":"user asked"}`)
	expect(t, env, c, 200, "", update)
	if c.Str("state") != "expired" || c.Str("canceledAt") == "" || c.Str("cancelReason") != "user asked" {
		t.Fatalf("cancel body: %s", c.Raw)
	}
	create(t, env, `{"actionId":"pending","userId":"u","activeAt":"`+future+`"}`)
	create(t, env, `{"actionId":"short","userId":"u","expiresAt":"`+time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)+`"}`)
	create(t, env, `{"actionId":"open","userId":"u"}`)

	tests := []struct {
		name, path, body string
		status           int
		code, ctxField   string
		ctxWant          string
	}{
		{"consume again", "/actions/consumed/consume", `{}`, 409, "already_used", "consumedAt", first.Str("consumedAt")},
		{"consume canceled", "/actions/canceled/consume", ``, 410, "canceled", "canceledAt", c.Str("canceledAt")},
		{"consume pending", "/actions/pending/consume", ``, 409, "not_active", "activeAt", ""},
		{"consume missing", "/actions/missing/consume", ``, 404, "action_not_found", "", ""},
		{"cancel consumed", "/actions/consumed/cancel", ``, 409, "already_used", "consumedAt", first.Str("consumedAt")},
		{"cancel missing", "/actions/missing/cancel", ``, 404, "action_not_found", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, env, "POST", tt.path, tt.body)
			expect(t, env, r, tt.status, tt.code, update)
			if tt.ctxField != "" && (r.Str(tt.ctxField) == "" || tt.ctxWant != "" && r.Str(tt.ctxField) != tt.ctxWant) {
				t.Fatalf("%s = %q, want %q in %s", tt.ctxField, r.Str(tt.ctxField), tt.ctxWant, r.Raw)
			}
		})
	}

	t.Run("cancel twice answers the first", func(t *testing.T) {
		again := do(t, env, "POST", "/actions/canceled/cancel", `{"reason":"other"}`)
		expect(t, env, again, 200, "", update)
		if again.Raw != c.Raw || again.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("second cancel:\n%s\nfirst:\n%s", again.Raw, c.Raw)
		}
	})
	t.Run("expired", func(t *testing.T) {
		env.Shift(2 * time.Minute) // the server's clock passes expiresAt of "short"
		defer env.Shift(0)
		r := do(t, env, "POST", "/actions/short/consume", ``)
		expect(t, env, r, 410, "expired", update)
		if r.Str("expiresAt") == "" {
			t.Fatal("no expiresAt")
		}
		expect(t, env, do(t, env, "POST", "/actions/short/cancel", ``), 410, "expired", update)
		g := do(t, env, "GET", "/actions/short", "")
		if g.Str("state") != "expired" {
			t.Fatalf("GET state %s", g.Str("state"))
		}
		env.Counter.Take()
	})
	t.Run("consume becomes possible at activeAt", func(t *testing.T) {
		env.Shift(2 * time.Hour)
		defer env.Shift(0)
		expect(t, env, do(t, env, "POST", "/actions/pending/consume", ``), 200, "", update)
	})
}

// TestTTL checks the retention window: create sets ttl to expiresAt +
// retention, consume and cancel move it to their own time + retention.
func TestTTL(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	r := create(t, env, `{"actionId":"a","userId":"u"}`)
	expires, _ := time.Parse(time.RFC3339, r.Str("expiresAt"))
	const retention = 30 * 24 * time.Hour
	if got := ttl(t, env, "a"); got != expires.Add(retention).Unix() {
		t.Fatalf("ttl after create = %d, want %d", got, expires.Add(retention).Unix())
	}
	c := do(t, env, "POST", "/actions/a/consume", ``)
	consumed, _ := time.Parse(time.RFC3339, c.Str("consumedAt"))
	if got := ttl(t, env, "a"); got != consumed.Add(retention).Unix() {
		t.Fatalf("ttl after consume = %d, want %d", got, consumed.Add(retention).Unix())
	}
	create(t, env, `{"actionId":"b","userId":"u"}`)
	x := do(t, env, "POST", "/actions/b/cancel", ``)
	canceled, _ := time.Parse(time.RFC3339, x.Str("canceledAt"))
	if got := ttl(t, env, "b"); got != canceled.Add(retention).Unix() {
		t.Fatalf("ttl after cancel = %d, want %d", got, canceled.Add(retention).Unix())
	}
}

func ttl(t *testing.T, env *testkit.Env, id string) int64 {
	t.Helper()
	item := rawItem(t, env, id)
	var v int64
	fmt.Sscan(item["ttl"].(*types.AttributeValueMemberN).Value, &v)
	return v
}

func rawItem(t *testing.T, env *testkit.Env, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := env.DB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(env.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}},
	})
	if err != nil || out.Item == nil {
		t.Fatalf("raw get %s: %v", id, err)
	}
	return out.Item
}

// TestConsumeRace: 200 goroutines consume each of 50 actions at once. Each
// action has exactly one 200; every other caller gets 409 with the winner's
// consumedAt.
func TestConsumeRace(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.On(testkit.OwnDynamoDB(t)))
	actions, racers := testkit.Scale(50), 200
	for i := range actions {
		create(t, env, fmt.Sprintf(`{"actionId":"race-%d","userId":"u"}`, i))
	}
	start := time.Now()
	for i := range actions {
		path := fmt.Sprintf("%s/actions/race-%d/consume", env.URL, i)
		results := make([]*testkit.Response, racers)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for g := range racers {
			wg.Go(func() {
				<-gate
				results[g], errs[g] = testkit.Send(client, "POST", path, fmt.Sprintf(`{"reason":"racer %d"}`, g))
			})
		}
		close(gate)
		wg.Wait()
		winners, winnerAt := 0, ""
		for g, r := range results {
			if errs[g] != nil {
				t.Fatal(errs[g])
			}
			if r.Status == 200 {
				winners++
				winnerAt = r.Str("consumedAt")
			}
		}
		if winners != 1 {
			t.Fatalf("action %d: %d winners", i, winners)
		}
		for _, r := range results {
			if r.Status != 200 && (r.Status != 409 || r.Str("error") != "already_used" || r.Str("consumedAt") != winnerAt) {
				t.Fatalf("action %d: loser got %d %s (winner at %s)", i, r.Status, r.Raw, winnerAt)
			}
		}
	}
	retried := env.Counter.Retried() // the SDK's re-sends of one write (a loaded DynamoDB Local's 500s): not a second write
	counts := env.Counter.Take()
	t.Logf("%d actions x %d racers: %d consumes in %s, DynamoDB requests %v (the SDK's retries among them: %v)", actions, racers, actions*racers, time.Since(start), counts, retried)
	if counts["UpdateItem"]-retried["UpdateItem"] != actions*racers || len(counts) != 1 {
		t.Fatalf("want exactly one UpdateItem per consume (the SDK's retries aside), got %v (retries %v)", counts, retried)
	}
}

// TestBadInputWritesNothing: every malformed request is a 400 naming the
// field, or 413, and makes no DynamoDB request at all.
func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	tests := []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		field                    string
	}{
		{"empty create body", "POST", "/actions", ``, nil, 400, "body"},
		{"not json", "POST", "/actions", `{`, nil, 400, "body"},
		{"array body", "POST", "/actions", `[]`, nil, 400, "body"},
		{"missing userId", "POST", "/actions", `{}`, nil, 400, "userId"},
		{"wrong type", "POST", "/actions", `{"userId":1}`, nil, 400, "userId"},
		{"unknown field", "POST", "/actions", `{"userId":"u","color":"red"}`, nil, 400, "color"},
		{"duplicate key", "POST", "/actions", `{"userId":"u","userId":"v"}`, nil, 400, "userId"},
		{"invalid utf-8", "POST", "/actions", "{\"userId\":\"\xff\"}", nil, 400, "userId"},
		{"NaN", "POST", "/actions", `{"userId":"u","maxPinAttempts":NaN}`, nil, 400, "maxPinAttempts"},
		{"expires before active", "POST", "/actions", `{"userId":"u","activeAt":"2030-01-02T00:00:00Z","expiresAt":"2030-01-01T00:00:00Z"}`, nil, 400, "expiresAt"},
		{"bad time", "POST", "/actions", `{"userId":"u","expiresAt":"soon"}`, nil, 400, "expiresAt"},
		{"bad actionId", "POST", "/actions", `{"userId":"u","actionId":"a b"}`, nil, 400, "actionId"},
		{"long userId", "POST", "/actions", `{"userId":"` + strings.Repeat("u", 300) + `"}`, nil, 400, "userId"},
		{"metadata not strings", "POST", "/actions", `{"userId":"u","metadata":{"a":1}}`, nil, 400, "metadata.a"},
		{"trailing garbage", "POST", "/actions", `{"userId":"u"} x`, nil, 400, "body"},
		{"oversize body", "POST", "/actions", `{"userId":"` + strings.Repeat("u", 70<<10) + `"}`, nil, 413, ""},
		{"bad path id", "POST", "/actions/a%20b/consume", ``, nil, 400, "actionId"},
		{"consume unknown field", "POST", "/actions/x/consume", `{"reasn":"typo"}`, nil, 400, "reasn"},
		{"long reason", "POST", "/actions/x/cancel", `{"reason":"` + strings.Repeat("r", 300) + `"}`, nil, 400, "reason"},
		{"bad idempotency key", "POST", "/actions/x/consume", ``, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 400, "Idempotency-Key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, env, tt.method, tt.path, tt.body, tt.headers...)
			code := "invalid_request"
			if tt.status == 413 {
				code = "request_too_large"
			}
			expect(t, env, r, tt.status, code, none)
			if r.Str("field") != tt.field {
				t.Fatalf("field = %q, want %q (%s)", r.Str("field"), tt.field, r.Raw)
			}
		})
	}
}

// TestDependencyFault: with DynamoDB unreachable every route answers 503 with
// Retry-After and a body that names no internals, with and without a key.
func TestDependencyFault(t *testing.T) {
	t.Parallel()
	dead := testkit.NewDeadEnv(t)
	tok := strings.Repeat("0", 32)
	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/actions", `{"userId":"u"}`},
		{"POST", "/actions", `{"userId":"u","supersede":true,"kind":"x"}`},
		{"GET", "/actions/a", ``},
		{"POST", "/actions/a/consume", ``},
		{"POST", "/actions/a/consume", `{"useId":"x"}`},
		{"POST", "/actions/a/consume", `{"pin":"1234"}`},
		{"POST", "/actions/a/cancel", ``},
		{"GET", "/actions/a/uses", ``},
		{"GET", "/actions/a/uses?cursor=MC54", ``},
		{"POST", "/actions/a/uses/u/release", ``},
		{"GET", "/users/u/actions", ``},
		{"POST", "/users/u/actions/cancel", `{"kind":"k"}`},
		{"POST", "/keys/k/claim", `{"fingerprint":"f"}`},
		{"POST", "/keys/k/complete", `{"token":"` + tok + `","response":1}`},
		{"POST", "/keys/k/release", `{"token":"` + tok + `"}`},
		{"GET", "/keys/k", ``},
	} {
		for _, key := range [][]string{nil, {"Idempotency-Key", "ik"}} {
			r := testkit.Do(t, client, tt.method, dead.URL+tt.path, tt.body, key...)
			if r.Status != 503 || r.Str("error") != "unavailable" || r.Header.Get("Retry-After") == "" {
				t.Errorf("%s %s %v: %d %s", tt.method, tt.path, key, r.Status, r.Raw)
			}
			for _, leak := range []string{"dial", "127.0.0.1", "dynamodb", "operation error", "connect", "table"} {
				if strings.Contains(strings.ToLower(r.Raw), leak) {
					t.Errorf("%s %s: body leaks %q: %s", tt.method, tt.path, leak, r.Raw)
				}
			}
		}
	}
}
