package server_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/local/streams"
	"github.com/exactonce/exactonce/shared/publish"
)

// A use's event is its gate's stream record and what the publisher reads
// from the table then: the action and the take's record. These tests keep
// the stream's records (the reader hands them to keep, not to the
// publisher) and give them to the publisher themselves, after changing
// what that read finds.

// kept runs the local stack with its stream reader keeping each record
// instead of publishing it.
type kept struct {
	mu   sync.Mutex
	recs []lambdaevents.DynamoDBEventRecord
}

func (k *kept) option(t *testing.T) func(*server.Options) {
	return func(o *server.Options) {
		scaled(t, nil)(o)
		tune := o.TuneEvents
		o.TuneEvents = func(p *publish.Publisher, r *streams.Reader) {
			tune(p, r)
			r.Handle = func(_ context.Context, ev lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error) {
				k.mu.Lock()
				defer k.mu.Unlock()
				k.recs = append(k.recs, ev.Records...)
				return lambdaevents.DynamoDBEventResponse{}, nil
			}
		}
	}
}

// of returns the kept records of the items with these partition keys, in
// stream order.
func (k *kept) of(pks ...string) []lambdaevents.DynamoDBEventRecord {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []lambdaevents.DynamoDBEventRecord
	for _, r := range k.recs {
		if slices.Contains(pks, r.Change.Keys["actionId"].String()) {
			out = append(out, r)
		}
	}
	return out
}

// publishAll hands ev to the stack's publisher as the mapping would, up to
// PoisonAttempts times while it reports records, and returns the last
// answer and the errors it gave.
func publishAll(t *testing.T, env *testkit.Env, ev lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, []error) {
	t.Helper()
	var resp lambdaevents.DynamoDBEventResponse
	var errs []error
	for range publish.DefaultPoisonAttempts {
		var err error
		resp, err = env.Publisher.Handle(context.Background(), ev)
		if err != nil {
			errs = append(errs, err)
		}
		if err == nil && len(resp.BatchItemFailures) == 0 {
			break
		}
	}
	return resp, errs
}

// busEvents are the local bus's events as "detail-type actionId userId",
// with their ids.
func busEvents(t *testing.T, env *testkit.Env) (seen []string, ids map[string][]string) {
	t.Helper()
	ids = map[string][]string{}
	for _, e := range env.Bus.Events() {
		var d struct{ EventID, ActionID, UserID string }
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			t.Fatal(err)
		}
		k := e.DetailType + " " + d.ActionID + " " + d.UserID
		seen = append(seen, k)
		ids[k] = append(ids[k], d.EventID)
	}
	return seen, ids
}

// TestUnreadableUseActionHoldsBackOnlyItsRecord: a multi-use action edited
// by hand so that it no longer decodes (userId a number, docs/events.md's
// own example) holds back the event of its use alone: the batch's other
// events are published, its gate's record is reported and then set aside,
// and republish lists the item instead of failing, as it does a released
// use's gate edited so. (Before, the decode error of the read failed the
// whole batch as an EventBridge fault, every time, with nothing published
// or set aside; and republish failed, on either.)
func TestUnreadableUseActionHoldsBackOnlyItsRecord(t *testing.T) {
	t.Parallel()
	k := &kept{}
	env := testkit.NewEnv(t, k.option(t))
	from := time.Now().Add(-time.Second).UTC()
	for _, c := range [][2]string{
		{"/actions", `{"actionId":"c1","userId":"u"}`},
		{"/actions", `{"actionId":"c2","userId":"u"}`},
		{"/actions", `{"actionId":"m1","userId":"u","maxUses":3}`},
		{"/actions/c1/consume", `{}`},
		{"/actions/m1/consume", `{"useId":"dev"}`},
		{"/actions/c2/consume", `{}`},
	} {
		if r := testkit.Do(t, nil, "POST", env.URL+c[0], c[1]); r.Status >= 300 {
			t.Fatalf("%s: %s", c[0], r.Raw)
		}
	}
	env.Settled(t)
	batch := lambdaevents.DynamoDBEvent{Records: k.of("c1", "ug#0#m1", "c2")}
	if _, err := env.DB.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: aws.String(env.Table),
		Key:                       map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: "m1"}},
		UpdateExpression:          aws.String("SET userId = :n"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "42"}}}); err != nil {
		t.Fatal(err)
	}

	resp, errs := publishAll(t, env, batch)
	if len(errs) > 0 || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("publisher: errors %v, still reporting %v", errs, resp.BatchItemFailures)
	}
	seen, _ := busEvents(t, env)
	seen = slices.Compact(slices.Sorted(slices.Values(seen))) // each attempt publishes the batch's events again
	if !slices.Equal(seen, []string{"action.consumed c1 u", "action.consumed c2 u"}) {
		t.Fatalf("published %v, want c1's and c2's action.consumed", seen)
	}
	var dead []publish.Aside
	if err := json.Unmarshal([]byte(testkit.Do(t, nil, "GET", env.URL+"/_local/dead-letters", "").Raw), &dead); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Keys["actionId"] != "ug#0#m1" || dead[0].Attempts != publish.DefaultPoisonAttempts {
		t.Fatalf("set aside %+v, want the gate's record of m1", dead)
	}

	// A released use whose gate was edited so too: republish cannot tell
	// whether it left its gate, lists the gate and goes on.
	for _, c := range [][2]string{
		{"/actions", `{"actionId":"r2","userId":"u","maxUses":2,"releasable":true}`},
		{"/actions/r2/consume", `{"useId":"dev"}`},
		{"/actions/r2/uses/dev/release", ``},
	} {
		if r := testkit.Do(t, nil, "POST", env.URL+c[0], c[1]); r.Status >= 300 {
			t.Fatalf("%s: %s", c[0], r.Raw)
		}
	}
	if _, err := env.DB.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: aws.String(env.Table),
		Key:                       map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: "ug#0#r2"}},
		UpdateExpression:          aws.String("SET h = :s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: "x"}}}); err != nil {
		t.Fatal(err)
	}

	r := testkit.Do(t, nil, "POST", env.URL+"/_local/republish", `{"from":"`+from.Format(time.RFC3339Nano)+`"}`)
	var res struct{ Undecodable []string }
	if r.Status != 200 || json.Unmarshal([]byte(r.Raw), &res) != nil || !slices.Contains(res.Undecodable, "m1") || !slices.Contains(res.Undecodable, "ug#0#r2") {
		t.Fatalf("republish: %d %s, want 200 listing m1 and ug#0#r2 as undecodable", r.Status, r.Raw)
	}
}

// TestLateUseRecordOfAReusedIDIsNotItsEvent: a gate's record handled
// after its action's retention ended and the id was created again (a
// batch retried after a long outage, a short EXACTONCE_RETENTION) is not
// published with the new action's user, kind and id: the record is
// reported and set aside like one whose action is gone, and the use keeps
// the one event id it had. (Before, it was published again as an
// action.used of the new action, under a second event id.)
func TestLateUseRecordOfAReusedIDIsNotItsEvent(t *testing.T) {
	t.Parallel()
	k := &kept{}
	env := testkit.NewEnv(t, k.option(t))
	do := func(path, body string) {
		if r := testkit.Do(t, nil, "POST", env.URL+path, body); r.Status >= 300 {
			t.Fatalf("%s: %s", path, r.Raw)
		}
	}
	do("/actions", `{"actionId":"r1","userId":"alice","kind":"licence","maxUses":3}`)
	do("/actions/r1/consume", `{"useId":"dev"}`)
	env.Settled(t)
	gate := lambdaevents.DynamoDBEvent{Records: k.of("ug#0#r1")}
	if _, errs := publishAll(t, env, gate); len(errs) > 0 {
		t.Fatal(errs)
	}
	// Its retention ends: TTL deletes the action and its gate (the take's
	// record is another item, deleted on its own); the id is created again.
	for _, pk := range []string{"r1", "ug#0#r1"} {
		if _, err := env.DB.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(env.Table),
			Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: pk}}}); err != nil {
			t.Fatal(err)
		}
	}
	do("/actions", `{"actionId":"r1","userId":"bob","kind":"other","maxUses":3}`)

	if resp, errs := publishAll(t, env, gate); len(errs) > 0 || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("late record: errors %v, still reporting %v", errs, resp.BatchItemFailures)
	}
	seen, ids := busEvents(t, env)
	if !slices.Equal(seen, []string{"action.used r1 alice"}) || len(ids["action.used r1 alice"]) != 1 {
		t.Fatalf("published %v (ids %v), want alice's one action.used", seen, ids)
	}
}
