package idempotency_test

// Powertools for AWS Lambda's own idempotency suites, translated to Go and run
// against DynamoDB Local through the real SDK client: TypeScript
// packages/idempotency/tests (unit and e2e) and Python
// tests/functional/idempotency/_boto3/test_idempotency.py and
// tests/e2e/idempotency. Each test names the Powertools tests it mirrors.
// Behaviours that do not apply, and deliberate differences, are listed in the
// comparison table of docs/idempotency.md with their reasons.

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/idemkey"
)

type apigw = events.APIGatewayV2HTTPRequest

// event is an API Gateway event whose requestContext differs on every
// delivery, as a retried request's does.
func event(key, body string) apigw {
	return apigw{
		Headers:        map[string]string{"idempotency-key": key},
		Body:           body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: time.Now().Format(time.RFC3339Nano)},
	}
}

// record reads a stored key.
func record(t *testing.T, table interface {
	Get(context.Context, string, time.Time) (*idemkey.Key, error)
}, name string, now time.Time) *idemkey.Key {
	t.Helper()
	k, err := table.Get(context.Background(), name, now)
	if err != nil {
		t.Fatalf("record %s: %v", name, err)
	}
	return k
}

// Mirrors python test_idempotent_lambda_first_execution,
// test_idempotent_lambda_already_completed, typescript makeIdempotent "returns
// the stored result" cases and e2e "returns the same result and runs the
// handler once when called multiple times", python
// test_idempotent_function_serialization_custom_dict / _dataclass (typed
// replay) and _no_response, typescript "updates the item when the
// response_data is undefined" (a nil response replays as nil), and the
// defaults of typescript IdempotencyConfig "initializes the config with
// default values" (a deliberate difference: 24 h retention, Powertools 1 h).
func TestPowertoolsFirstExecutionAndReplay(t *testing.T) {
	t.Parallel()
	table, counter := newTable(t, testkit.DynamoDB(t))
	var runs atomic.Int32
	h := idempotency.Wrap(func(ctx context.Context, o order) (*receipt, error) {
		runs.Add(1)
		if o.Note == "nil" {
			return nil, nil
		}
		return &receipt{Charge: "ch_" + o.ID, Amount: o.Amount}, nil
	}, idempotency.Options[order, *receipt]{Store: table, Namespace: "pt", Key: orderID})
	ctx := context.Background()
	for i := range 3 {
		r, err := h(ctx, order{ID: "a", Amount: 5})
		if err != nil || *r != (receipt{"ch_a", 5}) {
			t.Fatalf("call %d: %+v %v", i, r, err)
		}
		r, err = h(ctx, order{ID: "n", Note: "nil"})
		if err != nil || r != nil {
			t.Fatalf("nil response, call %d: %+v %v", i, r, err)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("runs %d, want 2", runs.Load())
	}
	if n, only := updates(counter.Take()); n != 8 || !only {
		t.Errorf("2 keys, 3 calls each: %d UpdateItem, want 8 (claim and complete, then one refused claim per replay)", n)
	}
	k := record(t, table, "pt:a", time.Now())
	if got := k.ExpiresAt.Sub(k.CompletedAt); got < 24*time.Hour-2*time.Second || got > 24*time.Hour+time.Second {
		t.Errorf("retention %s, want 24 h", got)
	}
}

// Mirrors python test_idempotent_lambda_in_progress and
// test_idempotent_lambda_expires_in_progress_before_expire, typescript
// "throws when the record is in progress and within expiry window", python
// e2e test_parallel_execution_idempotency and typescript e2e "handles
// parallel invocations correctly"; python
// test_idempotent_lambda_in_progress_with_cache and
// test_in_progress_never_saved_to_cache: an in-progress answer is not
// cached, so the completed response is replayed afterwards.
func TestPowertoolsInProgress(t *testing.T) {
	t.Parallel()
	table, _ := newTable(t, testkit.DynamoDB(t))
	entered, finish := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	cache := idempotency.NewCache(10, time.Minute)
	h := idempotency.Wrap(func(ctx context.Context, o order) (receipt, error) {
		if runs.Add(1) == 1 {
			close(entered)
			<-finish
		}
		return receipt{Charge: "first"}, nil
	}, idempotency.Options[order, receipt]{Store: table, Namespace: "pt", Key: orderID, Cache: cache, Lease: time.Minute})
	ctx := context.Background()
	done := make(chan error)
	go func() { _, err := h(ctx, order{ID: "p"}); done <- err }()
	<-entered
	_, err := h(ctx, order{ID: "p"})
	var ip *idempotency.InProgressError
	if !errors.As(err, &ip) || ip.RetryAfter <= 0 || ip.RetryAfter > time.Minute {
		t.Fatalf("while running: %v, want ErrInProgress with the lease's end", err)
	}
	if cache.Len() != 0 {
		t.Fatal("an in-progress record was cached")
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx2, o := idempotency.WithOutcome(ctx)
	if r, err := h(ctx2, order{ID: "p"}); err != nil || r.Charge != "first" || !o.Replayed || runs.Load() != 1 {
		t.Fatalf("after: %+v %v %+v runs %d", r, err, o, runs.Load())
	}
}

// Mirrors python test_idempotent_lambda_expired, python e2e
// test_ttl_caching_expiration_idempotency and typescript e2e "recovers from
// an expired idempotency record and processes the next request": after the
// record's retention the key runs again, with a fresh record.
func TestPowertoolsExpiredRecordRunsAgain(t *testing.T) {
	t.Parallel()
	table, _ := newTable(t, testkit.DynamoDB(t))
	table.Retention = 5 * time.Second
	clk := newClock()
	var runs atomic.Int32
	h := idempotency.Wrap(func(ctx context.Context, o order) (int32, error) { return runs.Add(1), nil },
		idempotency.Options[order, int32]{Store: table, Namespace: "pt", Key: orderID, Lease: time.Second, Now: clk.Now})
	ctx := context.Background()
	for _, want := range []int32{1, 1} {
		if n, err := h(ctx, order{ID: "e"}); err != nil || n != want {
			t.Fatalf("within retention: %d %v, want %d", n, err, want)
		}
	}
	clk.Advance(6 * time.Second)
	if n, err := h(ctx, order{ID: "e"}); err != nil || n != 2 {
		t.Fatalf("after retention: %d %v, want a second run", n, err)
	}
}

// Mirrors python test_idempotent_lambda_first_execution_event_mutation: the
// function changing its input does not change the key or payload stored.
func TestPowertoolsEventMutation(t *testing.T) {
	t.Parallel()
	table, _ := newTable(t, testkit.DynamoDB(t))
	var runs atomic.Int32
	h := idempotency.Wrap(func(ctx context.Context, ev map[string]any) (string, error) {
		runs.Add(1)
		ev["id"], ev["amount"] = "mutated", 0
		return "ok", nil
	}, idempotency.Options[map[string]any, string]{Store: table, Namespace: "pt",
		Key: idempotency.KeyJMESPath[map[string]any]("id"), Payload: idempotency.PayloadJMESPath[map[string]any]("amount")})
	for range 2 {
		if r, err := h(context.Background(), map[string]any{"id": "m", "amount": 5}); err != nil || r != "ok" {
			t.Fatalf("%q %v", r, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("runs %d, want 1", runs.Load())
	}
}

// Mirrors python test_idempotent_lambda_exception and typescript "deletes
// the in progress record and throws when the idempotent function throws"
// and "throws immediately if an object other than an error was thrown": an
// error or a panic gives the key up and the next call runs. Issue 21 item
// 5: Powertools deletes the record, so a retry with another payload runs
// too; here the record stays with its failure count.
func TestPowertoolsFailureReleases(t *testing.T) {
	t.Parallel()
	table, counter := newTable(t, testkit.DynamoDB(t))
	var runs atomic.Int32
	h := idempotency.Wrap(func(ctx context.Context, o order) (receipt, error) {
		runs.Add(1)
		switch o.Note {
		case "fail":
			return receipt{}, errors.New("declined")
		case "panic":
			panic("not an error")
		}
		return receipt{Charge: "ok", Amount: o.Amount}, nil
	}, idempotency.Options[order, receipt]{Store: table, Namespace: "pt", Key: orderID, Payload: amountOnly})
	ctx := context.Background()
	if _, err := h(ctx, order{ID: "f", Amount: 1, Note: "fail"}); err == nil || err.Error() != "declined" {
		t.Fatalf("failure: %v", err)
	}
	func() {
		defer func() {
			if recover() != "not an error" {
				t.Fatal("the panic did not go on")
			}
		}()
		_, _ = h(ctx, order{ID: "f", Amount: 1, Note: "panic"})
	}()
	counter.Take()
	// Another payload after the failures: a released attempt has no response
	// to protect, so it runs.
	if r, err := h(ctx, order{ID: "f", Amount: 2}); err != nil || r.Amount != 2 {
		t.Fatalf("retry with another payload: %+v %v", r, err)
	}
	if n, only := updates(counter.Take()); n != 2 || !only {
		t.Errorf("retry: %d UpdateItem, want 2 (claim, complete)", n)
	}
	if k := record(t, table, "pt:f", time.Now()); k.Attempts != 3 || k.Failures != 2 || k.StateAt(time.Now()) != idemkey.StateCompleted {
		t.Errorf("record attempts %d failures %d state %s; want 3, 2, completed", k.Attempts, k.Failures, k.StateAt(time.Now()))
	}
	// Completed now: the first payload is refused again.
	if _, err := h(ctx, order{ID: "f", Amount: 1}); !errors.Is(err, idempotency.ErrPayloadMismatch) {
		t.Errorf("after completion, the other payload: %v, want ErrPayloadMismatch", err)
	}
	if runs.Load() != 3 {
		t.Errorf("runs %d, want 3", runs.Load())
	}
	// The /keys routes' claims (no AnyAfterRelease) still refuse another
	// fingerprint on a released key.
	if _, err := h(ctx, order{ID: "g", Amount: 1, Note: "fail"}); err == nil {
		t.Fatal("want the failure")
	}
	_, err := table.Claim(ctx, "pt:g", idemkey.Claim{Now: time.Now(), Fingerprint: mustFP(t, 2), Lease: time.Minute, Token: idemkey.NewToken()})
	if rej := (*idemkey.Rejection)(nil); !errors.As(err, &rej) || rej.Code != idemkey.CodeFingerprintMismatch {
		t.Errorf("a /keys-style claim with another fingerprint on a released key: %v, want fingerprint_mismatch", err)
	}
}

// Mirrors python test_idempotent_lambda_first_execution_with_validation,
// test_idempotent_lambda_already_completed_with_validation_bad_payload,
// _from_local_cache, test_idempotency_cache_with_payload_tampering,
// test_idempotency_payload_validation_with_tampering_nested_object, python
// e2e test_payload_tampering_validation and typescript "throws an
// IdempotencyValidationError when the hashes don't match" / "skips
// validation if payload validation is not enabled": Powertools' own
// expressions, as written.
func TestPowertoolsPayloadTampering(t *testing.T) {
	t.Parallel()
	table, _ := newTable(t, testkit.DynamoDB(t))
	type tx = map[string]any
	var runs atomic.Int32
	opts := idempotency.Options[tx, string]{Store: table, Namespace: "refunds",
		Key:     idempotency.KeyJMESPath[tx](`["refund_id", "customer_id"]`),
		Payload: idempotency.PayloadJMESPath[tx]("details"),
	}
	fn := func(ctx context.Context, t tx) (string, error) { runs.Add(1); return "refunded", nil }
	transaction := func(currency, note string) tx {
		return tx{"refund_id": "ffd11882", "customer_id": "9e9fc440", "note": note,
			"details": []any{map[string]any{"company_name": "Parker, Johnson and Rath", "currency": currency}}}
	}
	for _, cached := range []bool{false, true} {
		o := opts
		if cached {
			o.Cache, o.Namespace = idempotency.NewCache(10, time.Minute), "refunds-cached"
		}
		h := idempotency.Wrap(fn, o)
		ctx := context.Background()
		for _, note := range []string{"first", "outside the payload"} {
			if r, err := h(ctx, transaction("Turkish Lira", note)); err != nil || r != "refunded" {
				t.Fatalf("cached=%v %s: %q %v", cached, note, r, err)
			}
		}
		if _, err := h(ctx, transaction("Euro", "first")); !errors.Is(err, idempotency.ErrPayloadMismatch) {
			t.Errorf("cached=%v: tampered nested detail: %v, want ErrPayloadMismatch", cached, err)
		}
	}
	if runs.Load() != 2 {
		t.Errorf("runs %d, want 2 (one per table namespace)", runs.Load())
	}

	// No Payload: no validation. An API Gateway retry differs in its
	// requestContext every time and still replays (issue 21 item 2).
	var gwRuns atomic.Int32
	gw := idempotency.Wrap(func(ctx context.Context, r apigw) (string, error) { gwRuns.Add(1); return "charged", nil },
		idempotency.Options[apigw, string]{Store: table, Namespace: "gw", Key: idempotency.KeyJMESPath[apigw](`headers."idempotency-key"`)})
	for range 2 {
		if r, err := gw(context.Background(), event("k-1", `{"amount":1}`)); err != nil || r != "charged" {
			t.Fatalf("API Gateway retry without Payload: %q %v", r, err)
		}
	}
	if gwRuns.Load() != 1 {
		t.Errorf("API Gateway retry ran %d times, want 1", gwRuns.Load())
	}
}

// Mirrors python test_is_missing_idempotency_key,
// test_default_no_raise_on_missing_idempotency_key,
// test_raise_on_no_idempotency_key,
// test_idempotent_function_falsy_values_with_raise_on_no_idempotency_key,
// typescript "logs a warning when the idempotency key cannot be found" /
// "throws an error when throwOnNoIdempotencyKey is enabled and the key is not
// found", and python e2e test_optional_idempotency_key. Deliberate
// difference: ErrNoKey is the default (Powertools' default runs unguarded
// with a warning); RunWithoutKey opts in (issue 21 items 2 and 3).
func TestPowertoolsMissingKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v       any
		missing bool
	}{
		{nil, true}, {"", true}, {[]any{}, true}, {map[string]any{}, true}, {[]any{nil, nil}, true},
		// nested: a multi-select of absent fields (Powertools: a key)
		{map[string]any{"a": nil}, true}, {[]any{"", nil}, true}, {[]any{[]any{}, map[string]any{}}, true},
		{true, false}, {false, false}, {json.Number("0"), false}, {json.Number("0.0"), false}, {"Value", false},
		{"False", false}, {json.Number("10.01"), false}, {[]any{nil, "Value"}, false},
	} {
		if got := idempotency.MissingKey(c.v); got != c.missing {
			t.Errorf("MissingKey(%#v) = %v, want %v", c.v, got, c.missing)
		}
	}

	table, counter := newTable(t, testkit.DynamoDB(t))
	type ev = map[string]any
	var runs atomic.Int32
	fn := func(ctx context.Context, e ev) (int32, error) { return runs.Add(1), nil }
	strict := idempotency.Wrap(fn, idempotency.Options[ev, int32]{Store: table, Namespace: "pt", Key: idempotency.KeyJMESPath[ev]("[body, x]")})
	optional := idempotency.Wrap(fn, idempotency.Options[ev, int32]{Store: table, Namespace: "pt", RunWithoutKey: true,
		Key: idempotency.KeyJMESPath[ev](`headers."X-Idempotency-Key"`)})
	counter.Take()
	for _, e := range []ev{{}, {"body": nil}, {"body": []any{}}, {"body": map[string]any{}}, {"idemKey": 0}, {"idemKey": false}} {
		if _, err := strict(context.Background(), e); !errors.Is(err, idempotency.ErrNoKey) {
			t.Errorf("%v: %v, want ErrNoKey", e, err)
		}
	}
	for i := range 2 {
		ctx, o := idempotency.WithOutcome(context.Background())
		if n, err := optional(ctx, ev{"headers": ev{}}); err != nil || n != int32(i+1) || !o.NoKey {
			t.Fatalf("optional key, call %d: %d %v %+v (want a run each time)", i, n, err, o)
		}
	}
	if got := counter.Take(); len(got) != 0 {
		t.Errorf("calls without a key made requests %v", got)
	}
	if n, err := optional(context.Background(), ev{"headers": ev{"X-Idempotency-Key": "k"}}); err != nil || n != 3 {
		t.Fatalf("with the key: %d %v", n, err)
	}
	if n, err := optional(context.Background(), ev{"headers": ev{"X-Idempotency-Key": "k"}}); err != nil || n != 3 {
		t.Fatalf("with the key, again: %d %v (want the replay)", n, err)
	}
}

// Mirrors python test_jmespath_with_powertools_json, and typescript e2e
// makeIdempotent's eventKeyJmesPath 'foo' / payload cases: Powertools'
// expressions as written, powertools_json included.
func TestPowertoolsJMESPathKey(t *testing.T) {
	t.Parallel()
	ev := map[string]any{
		"requestContext": map[string]any{"authorizer": map[string]any{"claims": map[string]any{"sub": "cognito_user"}}},
		"body":           `{"id":"some_key","amount":9007199254740993,"user_id":"u-1"}`,
		"headers":        map[string]any{"X-Idempotency-Key": "hk"},
		"items":          []any{map[string]any{"id": "a", "n": 3}, map[string]any{"id": "b", "n": 7}},
	}
	for _, c := range []struct{ expr, want string }{
		{"[requestContext.authorizer.claims.sub, powertools_json(body).id]", `["cognito_user","some_key"]`},
		{"powertools_json(body).user_id", "u-1"},
		{"powertools_json(body).amount", "9007199254740993"}, // no double holds it: its text stays
		{"items[?n > `5`].id", `["b"]`},                      // other numbers compare as JMESPath's
		{"sum(items[].n)", "10"},
		{`headers."X-Idempotency-Key"`, "hk"},
		{"powertools_json(powertools_base64('eyJpZCI6ImI2NCJ9')).id", "b64"},
		{"powertools_json(powertools_base64_gzip('H4sIAAAAAAACA6tWykxRslJKr1KqBQCPNx5pCwAAAA==')).id", "gz"},
	} {
		got, err := idempotency.KeyJMESPath[map[string]any](c.expr)(ev)
		if err != nil || got != c.want {
			t.Errorf("%s = %q, %v; want %q", c.expr, got, err, c.want)
		}
	}
	if _, err := idempotency.KeyJMESPath[map[string]any]("powertools_json(headers)")(ev); err == nil {
		t.Error("powertools_json of an object: no error")
	}
	defer func() {
		if recover() == nil {
			t.Error("an invalid expression did not panic")
		}
	}()
	idempotency.KeyJMESPath[map[string]any]("[unclosed")
}

// Mirrors python test_idempotent_data_sorting and typescript deepSort "can
// sort ..." cases: the same data in another order is the same key and
// payload; python test_idempotent_function_falsy_values: 0 and false are
// keys (the whole input is the key when Key is nil, issue 21 item 2).
func TestPowertoolsWholeInputKey(t *testing.T) {
	t.Parallel()
	table, _ := newTable(t, testkit.DynamoDB(t))
	var runs atomic.Int32
	h := idempotency.Wrap(func(ctx context.Context, v json.RawMessage) (int32, error) { return runs.Add(1), nil },
		idempotency.Options[json.RawMessage, int32]{Store: table, Namespace: "pt"})
	ctx := context.Background()
	for _, c := range []struct {
		in   string
		want int32
	}{
		{`{"data":"test message 1","more_data":"more data 1"}`, 1},
		{`{"more_data": "more data 1", "data": "test message 1"}`, 1},
		{`{"data":"test message 2","more_data":"more data 1"}`, 2},
		{`0`, 3}, {`0`, 3}, {`false`, 4}, {`false`, 4},
	} {
		if n, err := h(ctx, json.RawMessage(c.in)); err != nil || n != c.want {
			t.Errorf("%s: %d %v, want %d", c.in, n, err, c.want)
		}
	}
	if _, err := h(ctx, json.RawMessage(`null`)); !errors.Is(err, idempotency.ErrNoKey) {
		t.Errorf("null input: %v, want ErrNoKey", err)
	}
}

// Mirrors python test_idempotent_function_duplicates and
// test_idempotent_function_and_lambda_handler, and typescript
// BasePersistenceLayer "appends the function name to the idempotency key
// prefix" / "initializes with empty key prefix if AWS_LAMBDA_FUNCTION_NAME
// is not in the environment variable" / "appends custom prefix": two
// functions on one table never share a key without a Namespace (issue 21
// item 2).
func TestPowertoolsFunctionsDoNotCollide(t *testing.T) {
	table, _ := newTable(t, testkit.DynamoDB(t))
	ctx := context.Background()
	a := idempotency.Wrap(func(ctx context.Context, o order) (string, error) { return "a", nil },
		idempotency.Options[order, string]{Store: table, Key: orderID})
	b := idempotency.Wrap(func(ctx context.Context, o order) (string, error) { return "b", nil },
		idempotency.Options[order, string]{Store: table, Key: orderID})
	ctxA, oa := idempotency.WithOutcome(ctx)
	ctxB, ob := idempotency.WithOutcome(ctx)
	if r, err := a(ctxA, order{ID: "same"}); err != nil || r != "a" {
		t.Fatalf("a: %q %v", r, err)
	}
	if r, err := b(ctxB, order{ID: "same"}); err != nil || r != "b" {
		t.Fatalf("b: %q %v, want its own run (a's response replayed?)", r, err)
	}
	if oa.Key == ob.Key || !strings.Contains(oa.Key, "TestPowertoolsFunctionsDoNotCollide") {
		t.Errorf("keys %q and %q", oa.Key, ob.Key)
	}
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "payments")
	c := idempotency.Wrap(func(ctx context.Context, o order) (string, error) { return "c", nil },
		idempotency.Options[order, string]{Store: table, Key: orderID})
	ctxC, oc := idempotency.WithOutcome(ctx)
	if _, err := c(ctxC, order{ID: "same"}); err != nil || !strings.HasPrefix(oc.Key, "payments.") {
		t.Errorf("in a Lambda: key %q %v, want the function's name first", oc.Key, err)
	}
	ctxD, od := idempotency.WithOutcome(ctx)
	d := idempotency.Wrap(func(ctx context.Context, o order) (string, error) { return "d", nil },
		idempotency.Options[order, string]{Store: table, Key: orderID, Namespace: "custom"})
	if _, err := d(ctxD, order{ID: "same"}); err != nil || od.Key != "custom:same" {
		t.Errorf("custom namespace: key %q %v", od.Key, err)
	}
}

// Mirrors python e2e test_ttl_caching_timeout_idempotency, typescript e2e
// "recovers from a timed out request and processes the next one",
// typescript saveInProgress "calls the _putRecord method with the correct
// arguments" (the in-progress expiry is the remaining time) and python
// test_idempotent_lambda_expires_in_progress_after_expire /
// test_idempotent_lambda_expires_in_progress_unavailable_remaining_time
// (no deadline: DefaultLease here, none there): issue 21 item 4.
func TestPowertoolsLeaseFollowsDeadline(t *testing.T) {
	t.Parallel()
	table, _ := newTable(t, testkit.DynamoDB(t))
	clk := newClock()
	var runs atomic.Int32
	var lease sync.Map
	h := idempotency.Wrap(func(ctx context.Context, o order) (string, error) {
		runs.Add(1)
		info, _ := idempotency.FromContext(ctx)
		lease.Store(o.Note, info.LeaseExpiresAt.Sub(clk.Now()))
		if o.Note == "timeout" {
			return "", context.DeadlineExceeded // held: the outcome is unknown
		}
		return "done", nil
	}, idempotency.Options[order, string]{Store: table, Namespace: "pt", Key: orderID, Now: clk.Now,
		Release: func(err error) bool { return !errors.Is(err, context.DeadlineExceeded) }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h(ctx, order{ID: "t", Note: "timeout"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	if d, _ := lease.Load("timeout"); d.(time.Duration) > 30*time.Second || d.(time.Duration) < 10*time.Second {
		t.Errorf("lease %s, want the (at most) 30 s left until the deadline", d)
	}
	if _, err := h(context.Background(), order{ID: "t"}); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("before the deadline: %v, want ErrInProgress", err)
	}
	clk.Advance(30 * time.Second)
	if r, err := h(context.Background(), order{ID: "t", Note: "next"}); err != nil || r != "done" {
		t.Fatalf("after the deadline: %q %v, want the next run", r, err)
	}
	if d, _ := lease.Load("next"); d.(time.Duration) != idempotency.DefaultLease {
		t.Errorf("no deadline: lease %s, want DefaultLease", d)
	}
	if runs.Load() != 2 {
		t.Errorf("runs %d, want 2", runs.Load())
	}
}

// Mirrors python test_responsehook_lambda_first_execution,
// test_idempotent_lambda_already_completed_response_hook_is_called,
// _with_none, python e2e test_response_hook_idempotency and typescript
// "calls the provided response hook": not called on the first execution;
// on a replay it gets the key, the response (nil too) and the record's
// expiry (issue 21 item 6), from the table and from the cache.
func TestPowertoolsResponseHook(t *testing.T) {
	t.Parallel()
	table, _ := newTable(t, testkit.DynamoDB(t))
	var hooked []time.Time
	h := idempotency.Wrap(func(ctx context.Context, o order) (map[string]any, error) {
		if o.Note == "nil" {
			return nil, nil
		}
		return map[string]any{"message": "first_response"}, nil
	}, idempotency.Options[order, map[string]any]{Store: table, Namespace: "pt", Key: orderID, Cache: idempotency.NewCache(1, time.Minute),
		OnReplay: func(ctx context.Context, key string, r map[string]any, expiresAt time.Time) map[string]any {
			hooked = append(hooked, expiresAt)
			return map[string]any{"response": r, "x-response-hook": key}
		}})
	ctx := context.Background()
	if r, err := h(ctx, order{ID: "h"}); err != nil || r["x-response-hook"] != nil || len(hooked) != 0 {
		t.Fatalf("first execution: %v %v, hook calls %d", r, err, len(hooked))
	}
	want := record(t, table, "pt:h", time.Now()).ExpiresAt
	_, _ = h(ctx, order{ID: "other"}) // evicts h from the one-entry cache
	for _, fromCache := range []bool{false, true} {
		ctx, o := idempotency.WithOutcome(ctx)
		r, err := h(ctx, order{ID: "h"})
		if err != nil || r["x-response-hook"] != "h" || r["response"].(map[string]any)["message"] != "first_response" || o.FromCache != fromCache {
			t.Fatalf("replay (from the cache: %v): %v %v %+v", fromCache, r, err, o)
		}
	}
	if _, err := h(ctx, order{ID: "n", Note: "nil"}); err != nil {
		t.Fatal(err)
	}
	r, err := h(ctx, order{ID: "n", Note: "nil"})
	if m, ok := r["response"].(map[string]any); err != nil || !ok || m != nil || r["x-response-hook"] != "n" {
		t.Fatalf("nil response replay: %#v %v", r, err)
	}
	if len(hooked) != 3 {
		t.Errorf("hook calls %d, want 3 (replays only)", len(hooked))
	}
	for i, e := range hooked {
		if i < 2 && !e.Equal(want) || e.Before(time.Now().Add(23*time.Hour)) {
			t.Errorf("hook %d got expiry %s, want the record's %s", i, e, want)
		}
	}
}

// Mirrors python test_idempotent_persistence_exception_updating,
// _deleting, _getting, test_idempotent_lambda_save_inprogress_error and
// typescript "throws and wraps the error thrown by the underlying
// saveSuccessfulResult" / "deleteRecord": a DynamoDB outage is an error to
// the caller, never a silent success or a second run.
func TestPowertoolsPersistenceErrors(t *testing.T) {
	t.Parallel()
	proxy, table := proxiedTable(t, 0)
	var runs atomic.Int32
	h := idempotency.Wrap(func(ctx context.Context, o order) (string, error) {
		runs.Add(1)
		proxy.Down(o.Note != "") // the outage starts while the function runs
		if o.Note == "fail" {
			return "", errors.New("declined")
		}
		return "ok", nil
	}, idempotency.Options[order, string]{Store: table, Namespace: "pt", Key: orderID, Lease: time.Minute})
	ctx := context.Background()
	if _, err := h(ctx, order{ID: "u", Note: "down"}); err == nil || !strings.Contains(err.Error(), "complete") {
		t.Errorf("complete during an outage: %v, want the complete's error", err)
	}
	proxy.Down(false)
	if _, err := h(ctx, order{ID: "u"}); !errors.Is(err, idempotency.ErrInProgress) {
		t.Errorf("after a complete lost to an outage: %v, want ErrInProgress (the effect happened)", err)
	}
	if _, err := h(ctx, order{ID: "d", Note: "fail"}); err == nil || !strings.Contains(err.Error(), "declined") || !strings.Contains(err.Error(), "release") {
		t.Errorf("release during an outage: %v, want the function's and the release's error", err)
	}
	proxy.Down(true)
	if _, err := h(ctx, order{ID: "g"}); err == nil || !strings.Contains(err.Error(), "claim") {
		t.Errorf("claim during an outage: %v, want the claim's error", err)
	}
	proxy.Down(false)
	if runs.Load() != 2 {
		t.Errorf("runs %d, want 2", runs.Load())
	}
}

// Issue 21 item 1 (Powertools leaves the record in progress when the
// response cannot be saved): a response that is not JSON (NaN) or larger
// than an item holds, after the effect ran, keeps the key held for the rest
// of its retention; the caller gets ErrResponseNotStored, every later call
// too (as ErrInProgress), and the effect never runs twice. The largest
// response that fits is stored and replayed.
func TestPowertoolsResponseNotStorable(t *testing.T) {
	t.Parallel()
	table, counter := newTable(t, testkit.DynamoDB(t))
	clk := newClock()
	var runs atomic.Int32
	h := idempotency.Wrap(func(ctx context.Context, o order) (any, error) {
		runs.Add(1)
		switch o.Note {
		case "nan":
			return math.NaN(), nil
		case "huge":
			return strings.Repeat("x", idempotency.MaxResponseBytes-1), nil // its JSON: one byte too many
		case "panics":
			return panicky{}, nil
		}
		return strings.Repeat("y", idempotency.MaxResponseBytes-2), nil // exactly the limit
	}, idempotency.Options[order, any]{Store: table, Namespace: strings.Repeat("n", 200), Key: orderID, Lease: time.Minute, Now: clk.Now})
	ctx := context.Background()
	for _, note := range []string{"nan", "huge", "panics"} {
		counter.Take()
		_, err := h(ctx, order{ID: note, Note: note})
		if !errors.Is(err, idempotency.ErrResponseNotStored) || !strings.Contains(err.Error(), "could not be stored") {
			t.Fatalf("%s: %v, want ErrResponseNotStored", note, err)
		}
		if n, only := updates(counter.Take()); n != 2 || !only {
			t.Errorf("%s: %d UpdateItem, want 2 (claim, hold)", note, n)
		}
		clk.Advance(2 * time.Hour) // far past the lease
		_, err = h(ctx, order{ID: note, Note: note})
		if !errors.Is(err, idempotency.ErrInProgress) || !errors.Is(err, idempotency.ErrResponseNotStored) {
			t.Errorf("%s, 2 h later: %v, want ErrInProgress and ErrResponseNotStored", note, err)
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("runs %d, want 3: an unstorable response let the effect run again", runs.Load())
	}
	for range 2 {
		r, err := h(ctx, order{ID: strings.Repeat("k", 50), Note: "fits"})
		if s, _ := r.(string); err != nil || len(s) != idempotency.MaxResponseBytes-2 {
			t.Fatalf("the largest response: %d bytes, %v", len(s), err)
		}
	}
	if runs.Load() != 4 {
		t.Errorf("runs %d, want 4", runs.Load())
	}
}

// panicky is a response whose encoding panics.
type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("cannot encode") }
