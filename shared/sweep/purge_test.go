package sweep_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/sweep"
)

// TestPurge (issue 25: MRSC tables have no TTL): the purge deletes exactly
// what TTL would have, once its retention has passed, with one conditional
// DeleteItem each: finished actions (consumed, canceled, swept), released or
// completed keys, supersede pointers. Until then a late caller gets the same
// 409; open actions are kept (their action.expired comes first). A second
// run, as from another Region, deletes nothing.
func TestPurge(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, func(o *server.Options) { o.Retention = time.Hour })
	now := time.Now()
	post := func(path, body string) {
		t.Helper()
		if r := testkit.Do(t, nil, "POST", env.URL+path, body); r.Status >= 300 {
			t.Fatalf("POST %s: %d %s", path, r.Status, r.Raw)
		}
	}
	create(t, env, "consumed", now.Add(time.Hour))
	create(t, env, "canceled", now.Add(time.Hour))
	create(t, env, "swept", now.Add(time.Minute))
	create(t, env, "unswept", now.Add(10*time.Minute))
	create(t, env, "future", now.Add(10*24*time.Hour))
	post("/actions", `{"actionId":"sup","userId":"u","kind":"login","supersede":true}`) // and its pointer item
	post("/actions/consumed/consume", "")
	post("/actions/canceled/cancel", "")
	post("/keys/k-1/claim", `{"fingerprint":"f"}`)
	sweepAt(t, env, now.Add(2*time.Minute)) // marks "swept" only
	db, table := env.DB, env.Table
	items := func() map[string]bool {
		out, err := db.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, it := range out.Items {
			ids[it["actionId"].(*types.AttributeValueMemberS).Value] = true
		}
		return ids
	}
	before := items()
	p := &sweep.Purger{Store: env.Sweeper.Store, Segments: 4}
	purgeAt := func(at time.Time) sweep.PurgeResult {
		t.Helper()
		p.Now = func() time.Time { return at }
		r, err := p.Run(context.Background())
		if err != nil || !r.Complete {
			t.Fatalf("purge at %s: %+v %v", at, r, err)
		}
		return r
	}
	if r := purgeAt(now.Add(30 * time.Minute)); r.Deleted != 0 || r.Matched != 0 {
		t.Fatalf("purge within the retention deleted %+v", r)
	}
	// Within the retention a late caller gets the same answer as ever.
	if r := testkit.Do(t, nil, "POST", env.URL+"/actions/consumed/consume", ""); r.Status != 409 || r.Str("error") != "already_used" {
		t.Fatalf("late consume: %d %s", r.Status, r.Raw)
	}
	env.Counter.Take()
	r := purgeAt(now.Add(30 * time.Hour)) // past every retention: the keys' 24 h too
	ops := env.Counter.Take()
	after := items()
	var gone []string
	for id := range before {
		if !after[id] {
			gone = append(gone, id)
		}
	}
	named := []string{"consumed", "canceled", "swept", "key#k-1"}
	var others []string // the supersede pointer, whatever its key
	for _, id := range gone {
		if !slices.Contains(named, id) {
			others = append(others, id)
		}
	}
	if len(gone) != 5 || len(others) != 1 || r.Deleted != 5 || r.Kept != 0 || ops["DeleteItem"] != 5 {
		t.Fatalf("purge deleted %v (%+v, requests %v), want %v and the supersede pointer", gone, r, ops, named)
	}
	for _, id := range []string{"unswept", "future", "sup", "sweep#watermarks"} {
		if !after[id] {
			t.Errorf("%s was purged", id)
		}
	}
	if r2 := purgeAt(now.Add(30 * time.Hour)); r2.Deleted != 0 {
		t.Fatalf("a second purge (another Region) deleted %+v", r2)
	}
	// The delete's condition holds at the moment of the delete: an item whose
	// retention moved on after the Scan listed it is kept.
	if ok, _, err := env.Sweeper.Store.Purge(context.Background(), "future", now.Add(30*time.Hour)); ok || err != nil {
		t.Fatalf("purged an open action: %v %v", ok, err)
	}
	// The sweeper Lambda: a scheduled event sweeps, {"purge": true} purges.
	h := sweep.Handler(env.Sweeper, p)
	if out, err := h(context.Background(), []byte(`{"purge":true}`)); err != nil {
		t.Fatal(err)
	} else if _, ok := out.(sweep.PurgeResult); !ok {
		t.Fatalf("purge event ran %T", out)
	}
	if out, err := h(context.Background(), []byte(`{"source":"aws.events","detail-type":"Scheduled Event","detail":{}}`)); err != nil {
		t.Fatal(err)
	} else if _, ok := out.(sweep.Result); !ok {
		t.Fatalf("scheduled event ran %T", out)
	}
	t.Logf("purge: %d items scanned (%.1f read units), %d deleted with %d DeleteItem (%.1f write units incl. index entries: %.2f per item)",
		r.Scanned, r.ReadUnits, r.Deleted, ops["DeleteItem"], r.WriteUnits, r.WriteUnits/float64(r.Deleted))
}

// TestPurgeErrorDoesNotNameTheKey: a purge that fails returns an error the
// sweeper Lambda logs. A hosted key's name may carry meaning (the API logs
// only a keyed hash of it), so the error names no item. Before the fix it
// quoted the item's partition key: key#<the name>.
func TestPurgeErrorDoesNotNameTheKey(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the request fails before DynamoDB answers
	_, _, err := env.Sweeper.Store.Purge(ctx, "key#alice.smith", time.Now())
	if err == nil || strings.Contains(err.Error(), "alice") {
		t.Fatalf("purge error: %v", err)
	}
}
