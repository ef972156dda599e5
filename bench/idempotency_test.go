package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/dynamostore"
	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/awsconfig"
)

// libraryRow is one path of an idempotent call: DynamoDB requests per call
// with the idempotency library, and with Powertools' published pattern
// (claim PutItem with ReturnValuesOnConditionCheckFailure=ALL_OLD, complete
// UpdateItem, release DeleteItem) implemented below on the same DynamoDB.
type libraryRow struct {
	Path       string         `json:"path"`
	Ours       map[string]int `json:"ours"`
	OursTotal  int            `json:"oursTotal"`
	Theirs     map[string]int `json:"powertoolsPattern"`
	TheirTotal int            `json:"powertoolsTotal"`
}

// TestIdempotencyRequests measures the library's requests per path (make
// bench puts them in the report; run alone: go test -run
// TestIdempotencyRequests ./bench, with EXACTONCE_BENCH_OUT to write
// idempotency.md and idempotency.json there).
func TestIdempotencyRequests(t *testing.T) {
	t.Parallel() // with the bench's other correctness tests (make test: under -race)
	rows := libraryRequests(t)
	want := map[string]int{"first execution": 2, "replay": 1, "replay from the cache": 0, "in progress": 1, "payload mismatch": 1, "takeover (lease lapsed)": 2, "failure (released)": 2}
	for _, r := range rows {
		if r.OursTotal != want[r.Path] {
			t.Errorf("%s: %d requests (%v), want %d", r.Path, r.OursTotal, r.Ours, want[r.Path])
		}
	}
	md := libraryMarkdown(rows)
	t.Log("\n" + md)
	if dir := os.Getenv("EXACTONCE_BENCH_OUT"); dir != "" {
		js, _ := json.MarshalIndent(rows, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "idempotency.json"), append(js, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "idempotency.md"), []byte("# ExactOnce benchmark results: idempotency library\n\n"+time.Now().UTC().Format(time.RFC3339)+"\n"+md), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func libraryMarkdown(rows []libraryRow) string {
	var b strings.Builder
	b.WriteString("\n## Idempotency library: DynamoDB requests per call (counted at the SDK's HTTP client)\n\n")
	b.WriteString("| path | idempotency library | Powertools' pattern, same DynamoDB |\n|---|---|---|\n")
	for _, r := range rows {
		theirs := fmt.Sprintf("%d %s", r.TheirTotal, opsString(r.Theirs))
		if r.Theirs == nil {
			theirs = "0 with its local cache (documented, not measured here)"
		}
		fmt.Fprintf(&b, "| %s | %d %s | %s |\n", r.Path, r.OursTotal, opsString(r.Ours), theirs)
	}
	b.WriteString("\nBoth validate the payload from the record the failed claim returned, so no read follows a refused claim. " +
		"The library's release is an UpdateItem (the key keeps its attempt and failure counts) where the pattern deletes the record.\n")
	return b.String()
}

func libraryRequests(t *testing.T) []libraryRow {
	cfg := awsconfig.Local(testkit.DynamoDB(t))
	counter := testkit.NewCounter(cfg.HTTPClient)
	cfg.HTTPClient = counter
	db := dynamodb.NewFromConfig(cfg)
	ctx := context.Background()
	table := "bench-idempotency-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := dynamostore.CreateTable(ctx, db, table, ""); err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	hold, release := make(chan struct{}), make(chan struct{})
	type in struct{ Key, Payload, Mode string }
	fn := func(ctx context.Context, x in) (string, error) {
		switch x.Mode {
		case "hold":
			close(hold)
			<-release
		case "fail":
			return "", errors.New("fails")
		case "stuck": // a holder that never finishes (a crashed process)
			return "", errStuck
		}
		return "done " + x.Key, nil
	}
	opts := idempotency.Options[in, string]{Store: dynamostore.New(db, table), Lease: time.Minute, Now: now,
		Key:     func(x in) (string, error) { return x.Key, nil },
		Payload: func(x in) (any, error) { return x.Payload, nil },
		Release: func(err error) bool { return err != errStuck }}
	ours := idempotency.Wrap(fn, opts)
	cached := opts
	cached.Cache = idempotency.NewCache(10, time.Minute)
	oursCached := idempotency.Wrap(fn, cached)
	pt := &powertoolsPattern{db: db, table: table + "-pt", now: now}
	if err := dynamostore.CreateTable(ctx, db, pt.table, ""); err != nil {
		t.Fatal(err)
	}

	measure := func(path string, ourCall, theirCall func()) libraryRow {
		counter.Take()
		ourCall()
		o := counter.Take()
		theirCall()
		th := counter.Take()
		return libraryRow{Path: path, Ours: o, OursTotal: total(o), Theirs: th, TheirTotal: total(th)}
	}
	var rows []libraryRow
	rows = append(rows, measure("first execution",
		func() { ours(ctx, in{"a", "p", ""}) }, func() { pt.do(ctx, "a", "p", false) }))
	rows = append(rows, measure("replay",
		func() { ours(ctx, in{"a", "p", ""}) }, func() { pt.do(ctx, "a", "p", false) }))
	oursCached(ctx, in{"a", "p", ""}) // fills the cache
	rows = append(rows, measure("replay from the cache",
		func() { oursCached(ctx, in{"a", "p", ""}) }, func() {}))
	rows[len(rows)-1].Theirs = nil
	rows = append(rows, measure("payload mismatch",
		func() { ours(ctx, in{"a", "other", ""}) }, func() { pt.do(ctx, "a", "other", false) }))
	held := make(chan struct{})
	go func() { defer close(held); ours(ctx, in{"h", "p", "hold"}) }()
	<-hold
	pt.claim(ctx, "h", "p") // a live Powertools claim
	rows = append(rows, measure("in progress",
		func() { ours(ctx, in{"h", "p", ""}) }, func() { pt.do(ctx, "h", "p", false) }))
	close(release)
	// The held call's completion is counted in no row.
	<-held
	ours(ctx, in{"s", "p", "stuck"}) // holds "s" until its lease lapses
	pt.claim(ctx, "s", "p")
	clock.Add(2 * time.Minute.Milliseconds())
	rows = append(rows, measure("takeover (lease lapsed)",
		func() { ours(ctx, in{"s", "p", ""}) }, func() { pt.do(ctx, "s", "p", false) }))
	rows = append(rows, measure("failure (released)",
		func() { ours(ctx, in{"f", "p", "fail"}) }, func() { pt.do(ctx, "f", "p", true) }))
	return rows
}

var errStuck = errors.New("stuck")

func total(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// powertoolsPattern is the request pattern Powertools for AWS Lambda
// documents for its DynamoDB persistence layer: PutItem the record
// INPROGRESS if absent, expired, or in progress past its in-progress expiry
// (ReturnValuesOnConditionCheckFailure=ALL_OLD: a refused claim carries the
// record, whose payload hash is validated); UpdateItem to COMPLETED with the
// response; DeleteItem on failure.
type powertoolsPattern struct {
	db    *dynamodb.Client
	table string
	now   func() time.Time
}

func (p *powertoolsPattern) claim(ctx context.Context, key, hash string) (map[string]types.AttributeValue, error) {
	now := p.now()
	_, err := p.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &p.table,
		Item: map[string]types.AttributeValue{
			"id": &types.AttributeValueMemberS{Value: key}, "status": &types.AttributeValueMemberS{Value: "INPROGRESS"},
			"expiration":             &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(time.Hour).Unix(), 10)},
			"in_progress_expiration": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10)},
			"validation":             &types.AttributeValueMemberS{Value: hash},
		},
		ConditionExpression:      aws.String("attribute_not_exists(#id) OR #expiry < :now OR (#status = :inprogress AND attribute_exists(#in_progress_expiry) AND #in_progress_expiry < :now_in_millis)"),
		ExpressionAttributeNames: map[string]string{"#id": "id", "#expiry": "expiration", "#status": "status", "#in_progress_expiry": "in_progress_expiration"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Unix(), 10)}, ":inprogress": &types.AttributeValueMemberS{Value: "INPROGRESS"},
			":now_in_millis": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)},
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, nil
	}
	return nil, err
}

// do is one idempotent call in that pattern.
func (p *powertoolsPattern) do(ctx context.Context, key, hash string, fail bool) {
	old, err := p.claim(ctx, key, hash)
	if err != nil || old != nil { // refused: validate the payload, then replay or in progress
		return
	}
	k := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}}
	if fail {
		p.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &p.table, Key: k})
		return
	}
	p.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &p.table, Key: k,
		UpdateExpression:         aws.String("SET #s = :c, #d = :d, #e = :e"),
		ExpressionAttributeNames: map[string]string{"#s": "status", "#d": "data", "#e": "expiration"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":c": &types.AttributeValueMemberS{Value: "COMPLETED"}, ":d": &types.AttributeValueMemberS{Value: `"done"`},
			":e": &types.AttributeValueMemberN{Value: strconv.FormatInt(p.now().Add(time.Hour).Unix(), 10)},
		},
	})
}
