package once_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/events/once"
)

// newGuard makes a claims table for the test on DynamoDB Local, with a
// request counter on the real SDK client.
var tables atomic.Int64

func newGuard(t *testing.T) (*once.Guard, *counter, *dynamodb.Client) {
	t.Helper()
	needDynamoDB(t)
	requests := &counter{next: httpClient(), ops: map[string]int{}}
	db := dynamodb.NewFromConfig(localConfig(requests))
	// A table a run: -count=N runs a test again in this process.
	table := "once-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + strconv.FormatInt(tables.Add(1), 10)
	if err := once.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	requests.Take()
	return once.New(db, table), requests, db
}

func claim(t *testing.T, db *dynamodb.Client, g *once.Guard, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: &g.Table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"eventId": &types.AttributeValueMemberS{Value: id}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func str(item map[string]types.AttributeValue, k string) string {
	switch v := item[k].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return ""
}

func TestRunsOncePerEventID(t *testing.T) {
	g, counter, db := newGuard(t)
	ctx := context.Background()
	var runs int
	fn := func(context.Context) error { runs++; return nil }

	ran, err := g.Do(ctx, "ev-1", fn)
	if err != nil || !ran {
		t.Fatalf("first delivery: ran=%v err=%v", ran, err)
	}
	if got := counter.Take(); got["UpdateItem"] != 2 || len(got) != 1 {
		t.Errorf("first delivery requests %v, want two UpdateItem (claim, complete)", got)
	}
	for range 3 {
		ran, err = g.Do(ctx, "ev-1", fn)
		if err != nil || ran {
			t.Fatalf("redelivery: ran=%v err=%v", ran, err)
		}
	}
	if got := counter.Take(); got["UpdateItem"] != 3 || len(got) != 1 {
		t.Errorf("3 redeliveries made %v, want 3 UpdateItem (failed claims) only", got)
	}
	if runs != 1 {
		t.Fatalf("handler ran %d times, want 1", runs)
	}
	if ran, err := g.Do(ctx, "ev-2", fn); !ran || err != nil || runs != 2 {
		t.Fatalf("another event id: ran=%v err=%v runs=%d", ran, err, runs)
	}
	item := claim(t, db, g, "ev-1")
	if str(item, "completedAt") == "" || str(item, "attempts") != "1" {
		t.Errorf("done claim: %v", item)
	}
	ttl, _ := strconv.ParseInt(str(item, "ttl"), 10, 64)
	if want := time.Now().Add(once.DefaultRetention).Unix(); ttl < want-60 || ttl > want+60 {
		t.Errorf("ttl %d, want about %d (now + retention)", ttl, want)
	}
	if _, err := g.Do(ctx, "", fn); err == nil {
		t.Error("empty event id accepted")
	}
}

func TestFailedHandlerReleasesClaim(t *testing.T) {
	g, counter, db := newGuard(t)
	ctx := context.Background()
	boom := errors.New("downstream down")
	ran, err := g.Do(ctx, "ev", func(context.Context) error { return boom })
	if !ran || !errors.Is(err, boom) {
		t.Fatalf("failing handler: ran=%v err=%v (want its own error)", ran, err)
	}
	if got := counter.Take(); got["UpdateItem"] != 2 || len(got) != 1 {
		t.Errorf("failed delivery requests %v, want two UpdateItem (claim, release)", got)
	}
	if item := claim(t, db, g, "ev"); item["token"] != nil || str(item, "releasedAt") == "" || str(item, "failures") != "1" {
		t.Fatalf("claim still held after failure: %v", item)
	}
	ran, err = g.Do(ctx, "ev", func(context.Context) error { return nil })
	if !ran || err != nil {
		t.Fatalf("redelivery after failure: ran=%v err=%v", ran, err)
	}
}

func TestPanickingHandlerReleasesClaim(t *testing.T) {
	g, _, db := newGuard(t)
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the handler's panic", r)
			}
		}()
		g.Do(context.Background(), "ev", func(context.Context) error { panic("kaboom") })
	}()
	if item := claim(t, db, g, "ev"); item["token"] != nil || str(item, "releasedAt") == "" {
		t.Fatalf("claim still held after panic: %v", item)
	}
	if ran, err := g.Do(context.Background(), "ev", func(context.Context) error { return nil }); !ran || err != nil {
		t.Fatalf("redelivery after panic: ran=%v err=%v", ran, err)
	}
}

// TestConcurrentDuplicates: 40 deliveries of one event at once, each retried
// like EventBridge would until it is acknowledged; the first run fails. The
// effect happens exactly once and every delivery ends acknowledged.
func TestConcurrentDuplicates(t *testing.T) {
	g, _, _ := newGuard(t)
	var attempts, effects, inProgress atomic.Int32
	fn := func(context.Context) error {
		if attempts.Add(1) == 1 {
			return errors.New("first attempt fails")
		}
		time.Sleep(20 * time.Millisecond) // hold the claim while others arrive
		effects.Add(1)
		return nil
	}
	const deliveries = 40
	var wg sync.WaitGroup
	errs := make(chan error, deliveries)
	start := make(chan struct{})
	for range deliveries {
		wg.Go(func() {
			<-start
			for try := 0; ; try++ {
				_, err := g.Do(context.Background(), "ev-race", fn)
				switch {
				case err == nil:
					return
				case errors.Is(err, once.ErrInProgress):
					inProgress.Add(1)
				case err.Error() != "first attempt fails":
					errs <- err
					return
				}
				if try > 500 {
					errs <- errors.New("never acknowledged")
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if effects.Load() != 1 {
		t.Fatalf("effect happened %d times, want exactly 1", effects.Load())
	}
	if attempts.Load() != 2 {
		t.Errorf("handler attempted %d times, want 2 (one failure, one success)", attempts.Load())
	}
	t.Logf("%d deliveries: %d handler runs, %d ErrInProgress answers", deliveries, attempts.Load(), inProgress.Load())
}

// TestLeaseTakeover: a holder that never finishes (a crashed process) blocks
// redeliveries only until its lease lapses; then one takes over, and the
// stale holder can neither mark done nor release the new claim.
func TestLeaseTakeover(t *testing.T) {
	g, _, db := newGuard(t)
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	g.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
	g.Lease = time.Minute
	ctx := context.Background()

	stuck, resume := make(chan struct{}), make(chan error)
	staleResult := make(chan error)
	go func() {
		_, err := g.Do(ctx, "ev", func(context.Context) error { close(stuck); return <-resume })
		staleResult <- err
	}()
	<-stuck

	if _, err := g.Do(ctx, "ev", func(context.Context) error { t.Error("ran during a live lease"); return nil }); !errors.Is(err, once.ErrInProgress) {
		t.Fatalf("during the lease: %v, want ErrInProgress", err)
	}
	clock.Add((61 * time.Second).Milliseconds())
	var took bool
	tookOver := make(chan struct{})
	go func() {
		defer close(tookOver) // once the takeover has marked the claim done
		ran, err := g.Do(ctx, "ev", func(context.Context) error {
			took = true
			return nil
		})
		if !ran || err != nil {
			t.Errorf("takeover: ran=%v err=%v", ran, err)
		}
	}()
	<-tookOver

	resume <- errors.New("stale holder fails late") // its release must not delete the new claim
	if err := <-staleResult; err == nil || errors.Is(err, once.ErrLeaseLost) {
		t.Fatalf("stale holder: %v, want its own error", err)
	}
	if !took || str(claim(t, db, g, "ev"), "completedAt") == "" {
		t.Fatalf("after takeover: took=%v claim=%v", took, claim(t, db, g, "ev"))
	}
	if ran, err := g.Do(ctx, "ev", func(context.Context) error { return nil }); ran || err != nil {
		t.Fatalf("after done: ran=%v err=%v", ran, err)
	}
}

// TestStaleHolderSucceedsLate: a holder that outlives its lease and then
// succeeds learns it (ErrLeaseLost) instead of overwriting the new claim.
func TestStaleHolderSucceedsLate(t *testing.T) {
	g, _, db := newGuard(t)
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	g.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
	g.Lease = time.Minute
	ctx := context.Background()
	ran, err := g.Do(ctx, "ev", func(context.Context) error {
		clock.Add((2 * time.Minute).Milliseconds())
		// Another delivery takes the lapsed claim and is still running.
		_, err := g.Do(ctx, "ev", func(context.Context) error {
			clock.Add(time.Second.Milliseconds())
			return nil
		})
		if err != nil {
			t.Errorf("takeover: %v", err)
		}
		return nil
	})
	if !ran || !errors.Is(err, once.ErrLeaseLost) {
		t.Fatalf("stale success: ran=%v err=%v, want ErrLeaseLost", ran, err)
	}
	if str(claim(t, db, g, "ev"), "completedAt") == "" {
		t.Fatal("claim not done")
	}
}

// TestLeaseFollowsDeadline: in Lambda the lease is the invocation's
// remaining time plus a margin, so a timed-out invocation frees its claim
// right after it is killed.
func TestLeaseFollowsDeadline(t *testing.T) {
	g, _, db := newGuard(t)
	now := time.Now()
	g.Now = func() time.Time { return now }
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(30*time.Second))
	defer cancel()
	_, err := g.Do(ctx, "ev", func(context.Context) error {
		lease, _ := strconv.ParseInt(str(claim(t, db, g, "ev"), "leaseExpiresAtMs"), 10, 64)
		if want := now.Add(35 * time.Second).UnixMilli(); lease != want {
			t.Errorf("lease until %d, want %d (deadline + 5 s)", lease, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	g.Now = nil
	if _, err := g.Do(context.Background(), "ev2", func(context.Context) error {
		lease, _ := strconv.ParseInt(str(claim(t, db, g, "ev2"), "leaseExpiresAtMs"), 10, 64)
		if d := time.Until(time.UnixMilli(lease)); d < once.DefaultLease-time.Minute || d > once.DefaultLease {
			t.Errorf("lease without deadline: %s, want about %s", d, once.DefaultLease)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestLegacyClaimCountsHandled: a claim the previous version wrote (PutItem,
// "state", no fingerprint) is acknowledged, not redelivered until its TTL.
func TestLegacyClaimCountsHandled(t *testing.T) {
	g, _, db := newGuard(t)
	_, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &g.Table, Item: map[string]types.AttributeValue{
		"eventId": &types.AttributeValueMemberS{Value: "old"}, "state": &types.AttributeValueMemberS{Value: "done"},
		"doneAt": &types.AttributeValueMemberN{Value: "1"}, "ttl": &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if ran, err := g.Do(context.Background(), "old", func(context.Context) error { t.Error("ran"); return nil }); ran || err != nil {
		t.Fatalf("legacy done claim: ran=%v err=%v", ran, err)
	}
}

// TestLegacyLapsedClaimRunsAgain: a claim the previous version of this
// package wrote for a delivery whose process then died (state "running",
// its lease lapsed) must be taken over by the next delivery, as the
// package promises ("a crash frees it when the lease lapses") and as the
// previous version did. The handler must run once.
func TestLegacyLapsedClaimRunsAgain(t *testing.T) {
	g, _, db := newGuard(t)
	putLegacy(t, db, g, "crashed", time.Now().Add(-time.Minute))
	runs := 0
	ran, err := g.Do(context.Background(), "crashed", func(context.Context) error { runs++; return nil })
	if runs != 1 || !ran || err != nil {
		t.Fatalf("a lapsed claim of a crashed holder (previous version): ran=%v err=%v runs=%d, want the handler run once", ran, err, runs)
	}
	if ran, err := g.Do(context.Background(), "crashed", func(context.Context) error { runs++; return nil }); ran || err != nil || runs != 1 {
		t.Fatalf("the next delivery: ran=%v err=%v runs=%d, want it acknowledged", ran, err, runs)
	}
}

// TestLegacyLiveClaimIsInProgress: a claim the previous version holds under
// a live lease (a delivery still running there, mid-upgrade) is that
// holder's: another delivery gets ErrInProgress (retry later), not an
// acknowledgement: if the holder then dies, an acknowledged event is lost.
func TestLegacyLiveClaimIsInProgress(t *testing.T) {
	g, _, db := newGuard(t)
	putLegacy(t, db, g, "live", time.Now().Add(time.Minute))
	ran, err := g.Do(context.Background(), "live", func(context.Context) error { t.Error("ran under a live claim"); return nil })
	if !errors.Is(err, once.ErrInProgress) {
		t.Fatalf("a live claim of the previous version was acknowledged (ran=%v err=%v), want ErrInProgress", ran, err)
	}
}

// putLegacy writes a claim as the package wrote it before it ran on the
// idempotency library: "running", its holder's token, its lease.
func putLegacy(t *testing.T, db *dynamodb.Client, g *once.Guard, id string, leaseUntil time.Time) {
	t.Helper()
	_, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &g.Table, Item: map[string]types.AttributeValue{
		"eventId":      &types.AttributeValueMemberS{Value: id},
		"state":        &types.AttributeValueMemberS{Value: "running"},
		"token":        &types.AttributeValueMemberS{Value: "old-holder"},
		"leaseUntilMs": &types.AttributeValueMemberN{Value: strconv.FormatInt(leaseUntil.UnixMilli(), 10)},
		"ttl":          &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// racing lets another delivery's write land just before the guard frees a
// lapsed legacy claim (its UpdateItem naming leaseUntilMs), through the
// same DynamoDB Local.
type racing struct {
	*dynamodb.Client
	first func()
}

func (r *racing) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, name := range in.ExpressionAttributeNames {
		if name == "leaseUntilMs" && r.first != nil {
			r.first()
			r.first = nil
		}
	}
	return r.Client.UpdateItem(ctx, in, opts...)
}

// TestLegacyClaimFreedMeanwhileRunsAgain: two deliveries meet one lapsed
// legacy claim; the other frees it first (or the old holder's release
// deleted it). The guard's own free is then refused, and it must claim
// the event, not count it handled: acknowledged with nobody running it,
// its effect would never happen.
func TestLegacyClaimFreedMeanwhileRunsAgain(t *testing.T) {
	for _, c := range []struct {
		name  string
		other func(db *dynamodb.Client, g *once.Guard, id string) error
	}{
		{"freed by another delivery", func(db *dynamodb.Client, g *once.Guard, id string) error {
			_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: &g.Table,
				Key:                      map[string]types.AttributeValue{"eventId": &types.AttributeValueMemberS{Value: id}},
				UpdateExpression:         aws.String("SET releasedToken = #t REMOVE #t, #s, #l"),
				ExpressionAttributeNames: map[string]string{"#t": "token", "#s": "state", "#l": "leaseUntilMs"}})
			return err
		}},
		{"deleted by its holder releasing it", func(db *dynamodb.Client, g *once.Guard, id string) error {
			_, err := db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: &g.Table,
				Key: map[string]types.AttributeValue{"eventId": &types.AttributeValueMemberS{Value: id}}})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, _, db := newGuard(t)
			putLegacy(t, db, g, "raced", time.Now().Add(-time.Minute))
			g.DB = &racing{Client: db, first: func() {
				if err := c.other(db, g, "raced"); err != nil {
					t.Fatal(err)
				}
			}}
			runs := 0
			if ran, err := g.Do(context.Background(), "raced", func(context.Context) error { runs++; return nil }); !ran || err != nil || runs != 1 {
				t.Fatalf("ran=%v err=%v runs=%d, want the handler run once", ran, err, runs)
			}
		})
	}
}
