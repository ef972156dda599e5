package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/httpapi"
)

// TestUserBadInput: bad input to the user routes: 400 naming the field, nothing written.
func TestUserBadInput(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	create(t, env, `{"actionId":"b1","userId":"u","kind":"login"}`)
	create(t, env, `{"actionId":"b2","userId":"u","kind":"coupon"}`)
	for _, c := range []struct{ path, body, field string }{
		{"/users/u/actions/cancel", `{"kind":null}`, "kind"},
		{"/users/u/actions/cancel", `{"kind":""}`, "kind"},
		{"/users/u/actions/cancel", `{"reason":null}`, "reason"},
		{"/users/u/actions/cancel", `{"kind":"login","kind":"coupon"}`, ""},
		{"/users/u/actions/cancel", `{"kind":"` + strings.Repeat("k", 65) + `"}`, "kind"},
		{"/users/u/actions/cancel", `{"kind":"a b"}`, "kind"},
		{"/users/u/actions/cancel", `{"other":1}`, "other"},
		{"/users/u/actions/cancel", `[]`, ""},
		{"/users/u/actions/cancel", `"x"`, ""},
		{"/users/u/actions/cancel", `{"kind":1}`, "kind"},
		{"/users/" + strings.Repeat("u", 257) + "/actions/cancel", ``, "userId"},
		{"/users/" + url.PathEscape(strings.Repeat("é", 257)) + "/actions/cancel", ``, "userId"},
		{"/users/" + url.PathEscape("a\x01b") + "/actions/cancel", ``, "userId"},
	} {
		env.Counter.Take()
		r := do(t, env, "POST", c.path, c.body, "Idempotency-Key", "bad-"+fmt.Sprint(len(c.body)))
		got := env.Counter.Take()
		t.Logf("%s %s -> %d %s %v", c.path[:min(len(c.path), 40)], c.body, r.Status, strings.TrimSpace(r.Raw), got)
		if r.Status/100 != 4 || (c.field != "" && r.Str("field") != c.field) || len(got) != 0 {
			t.Errorf("%s %s: %d %s, ddb %v", c.path[:min(len(c.path), 40)], c.body, r.Status, r.Raw, got)
		}
	}
	for _, id := range []string{"b1", "b2"} {
		if g := do(t, env, "GET", "/actions/"+id, ""); g.Str("state") != "active" {
			t.Errorf("%s after bad cancel-alls: %s", id, g.Raw)
		}
	}
	// A bad listing query is 400 naming its field, and reads nothing; a
	// whole number written with a sign or a leading zero is that number,
	// and a parameter the route does not have is ignored.
	for _, c := range []struct {
		q, field string
		actions  int // for a 200
	}{
		{"?kind=", "kind", 0}, {"?state=", "state", 0}, {"?limit=", "limit", 0}, {"?cursor=", "cursor", 0},
		{"?limit=1.0", "limit", 0}, {"?limit=0", "limit", 0}, {"?limit=101", "limit", 0},
		{"?kind=login&kind=coupon", "kind", 0}, {"?cursor=" + strings.Repeat("A", 5000), "cursor", 0},
		{"?limit=%2B1", "", 1}, {"?limit=01", "", 1}, {"?foo=1", "", 2},
	} {
		env.Counter.Take()
		r := do(t, env, "GET", "/users/u/actions"+c.q, "")
		got := env.Counter.Take()
		q := c.q[:min(len(c.q), 40)]
		switch {
		case c.field != "" && (r.Status != 400 || r.Str("field") != c.field || len(got) != 0):
			t.Errorf("list %s: %d %s, DynamoDB %v; want 400 naming %s, nothing read", q, r.Status, r.Raw, got, c.field)
		case c.field == "" && (r.Status != 200 || len(r.Body["actions"].([]any)) != c.actions):
			t.Errorf("list %s: %d %s; want 200 with %d actions", q, r.Status, r.Raw, c.actions)
		}
	}
	env.Counter.Take()
	r := do(t, env, "GET", "/users/"+strings.Repeat("u", 257)+"/actions", "")
	if r.Status != 400 || r.Str("field") != "userId" || len(env.Counter.Take()) != 0 {
		t.Errorf("huge userId list: %d %s", r.Status, r.Raw)
	}
}

func cursorOf(c int64, k string) string {
	b, _ := json.Marshal(map[string]any{"c": c, "k": k})
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestForgedCursors: forged cursors stay in the caller's tenant and user.
func TestForgedCursors(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, withTenants)
	as(t, env, alpha, "POST", "/actions", `{"actionId":"x1","userId":"victim"}`)
	as(t, env, alpha, "POST", "/actions", `{"actionId":"x2","userId":"victim"}`)
	as(t, env, beta, "POST", "/actions", `{"actionId":"y1","userId":"victim"}`)
	as(t, env, alpha, "POST", "/actions", `{"actionId":"z1","userId":"me"}`)
	// A page of alpha's "me" to learn the shape.
	r := as(t, env, alpha, "GET", "/users/me/actions?limit=1", "")
	t.Logf("alpha me: %s", r.Raw)
	far := time.Now().Add(time.Hour).UnixMilli()
	for _, k := range []string{"t#alpha#x1", "t#beta#y1", "x1", "t#alpha#zz", "t#alpha#x1 ", "key#t#alpha#x", "u#alpha#victim"} {
		for _, who := range []string{alpha, beta} {
			for _, user := range []string{"me", "victim"} {
				r := as(t, env, who, "GET", "/users/"+user+"/actions?cursor="+cursorOf(far, k), "")
				for _, id := range idsOr(r) {
					if user == "me" && id != "z1" || user == "victim" && who == alpha && id != "x1" && id != "x2" || user == "victim" && who == beta && id != "y1" {
						t.Errorf("%s lists %s's %s with cursor k=%s: %s", who, user, id, k, r.Raw)
					}
				}
				t.Logf("%s /users/%s k=%s -> %d %s", who[len(who)-12:], user, k, r.Status, strings.TrimSpace(r.Raw)[:min(120, len(strings.TrimSpace(r.Raw)))])
			}
		}
	}
}

func idsOr(r *testkit.Response) []string {
	if r.Status != 200 {
		return nil
	}
	return ids(r)
}

// TestUserCosts: request costs against docs/http-api.md.
func TestUserCosts(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	// (a) superseding create whose pointer names a consumed action: k = 0 open.
	create(t, env, `{"actionId":"s1","userId":"su","kind":"login","supersede":true}`)
	do(t, env, "POST", "/actions/s1/consume", ``)
	time.Sleep(5 * time.Millisecond)
	env.Counter.Take()
	r := do(t, env, "POST", "/actions", `{"actionId":"s2","userId":"su","kind":"login","supersede":true}`)
	// docs: 1 create + 1 pointer write + 1 Query + 1 BatchGetItem + k (0) UpdateItem
	costIs(t, env, "superseding create over 1 consumed", r, 201, map[string]int{"BatchGetItem": 1, "Query": 1, "UpdateItem": 2})
	// the same with the earlier one canceled by a cancel-all
	do(t, env, "POST", "/users/su/actions/cancel", ``)
	time.Sleep(5 * time.Millisecond)
	env.Counter.Take()
	r = do(t, env, "POST", "/actions", `{"actionId":"s3","userId":"su","kind":"login","supersede":true}`)
	t.Logf("superseding create over 1 consumed + 1 canceled (k=0): %d %v", r.Status, env.Counter.Take())
	// (b) first superseding create of a user: m = 0
	r = do(t, env, "POST", "/actions", `{"actionId":"f1","userId":"fresh","kind":"login","supersede":true}`)
	t.Logf("first superseding create (m=0): %d %v", r.Status, env.Counter.Take())

	// (c) cancel-all over one multi-use action (maxUses 2)
	create(t, env, `{"actionId":"m1","userId":"mu","maxUses":2}`)
	do(t, env, "POST", "/actions/m1/consume", `{"useId":"a"}`)
	env.Counter.Take()
	r = do(t, env, "POST", "/users/mu/actions/cancel", ``)
	got := env.Counter.Take()
	t.Logf("cancel-all over 1 open multi-use (maxUses 2): %d %s %v", r.Status, strings.TrimSpace(r.Raw), got)
	if got["Query"] != 1 || got["BatchGetItem"] != 1 {
		t.Errorf("cancel-all over 1 action: %v, want 1 Query and 1 BatchGetItem", got)
	}
	// single cancel of one for comparison
	create(t, env, `{"actionId":"m2","userId":"mu2","maxUses":2}`)
	r = do(t, env, "POST", "/actions/m2/cancel", ``)
	t.Logf("single cancel of a multi-use (maxUses 2): %d %v", r.Status, env.Counter.Take())
	// listing a user with one finished multi-use action and a kind filter
	r = do(t, env, "GET", "/users/mu/actions", "")
	t.Logf("list of 1 canceled multi-use: %d %v", r.Status, env.Counter.Take())

	// (d) cancel-all over exactly 100 open actions: ceil(100/100)=1 Query, 1 BatchGetItem, 100 UpdateItem
	for i := range 100 {
		create(t, env, fmt.Sprintf(`{"actionId":"h%03d","userId":"hund"}`, i))
	}
	r = do(t, env, "POST", "/users/hund/actions/cancel", ``)
	// docs: ceil(100/100) Query + ceil(100/100) BatchGetItem + 100 UpdateItem
	costIs(t, env, "cancel-all of exactly 100 open", r, 200, map[string]int{"BatchGetItem": 1, "Query": 1, "UpdateItem": 100})
	env.Counter.Take()
	r = do(t, env, "GET", "/users/hund/actions?limit=100", ``)
	t.Logf("list page limit=100 over exactly 100: %d n=%d cursor=%q %v", r.Status, len(ids(r)), r.Str("cursor"), env.Counter.Take())

	// (e) filtered page: 30 coupons newer than 2 logins, ?kind=login&limit=2
	for i := range 2 {
		create(t, env, fmt.Sprintf(`{"actionId":"fl%d","userId":"filt","kind":"login"}`, i))
	}
	time.Sleep(2 * time.Millisecond)
	for i := range 30 {
		create(t, env, fmt.Sprintf(`{"actionId":"fc%d","userId":"filt","kind":"coupon"}`, i))
	}
	r = do(t, env, "GET", "/users/filt/actions?kind=login&limit=2", ``)
	t.Logf("filtered page kind=login limit=2 behind 30 coupons: %d %v cursor=%q %v", r.Status, ids(r), r.Str("cursor"), env.Counter.Take())
}

// TestCancelAllRecordAnswerLost: a keyed cancel-all whose record write's answer is lost: the SDK
// re-sends it. The first call's answer must not say it is a replay.
func TestCancelAllRecordAnswerLost(t *testing.T) {
	t.Parallel()
	env, p := proxied(t)
	create(t, env, `{"actionId":"ra1","userId":"ru"}`)
	p.PassThenDrop(0, 1)
	r := do(t, env, "POST", "/users/ru/actions/cancel", `{"reason":"x"}`, "Idempotency-Key", "ra-1")
	p.PassThenDrop(0, 0)
	t.Logf("first keyed cancel-all, record answer lost: %d %v %s", r.Status, r.Header.Get("Idempotent-Replayed"), r.Raw)
	if r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "" || r.Body["canceled"] != 1.0 {
		t.Fatalf("first call answered %d Idempotent-Replayed=%q %s; want 200, no replay header, canceled 1", r.Status, r.Header.Get("Idempotent-Replayed"), r.Raw)
	}
}

// TestHalfDoneCancelAll: a half-done keyed cancel-all (writes failing part way) answers 503,
// and its re-send with its key finishes it: every action canceled once,
// one action.canceled each.
func TestHalfDoneCancelAll(t *testing.T) {
	t.Parallel()
	p, err := faults.Start(testkit.DynamoDB(t), faults.Rates{}, 1, "UpdateItem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	env := testkit.NewEnv(t, testkit.WithEvents, func(o *server.Options) { o.AWS.BaseEndpoint = aws.String(p.URL) })
	var want []string
	for i := range 12 {
		id := fmt.Sprintf("hd%02d", i)
		create(t, env, fmt.Sprintf(`{"actionId":"%s","userId":"hu"}`, id))
		want = append(want, id)
	}
	create(t, env, `{"actionId":"hdm","userId":"hu","maxUses":30}`) // 2 gates
	do(t, env, "POST", "/actions/hdm/consume", `{"useId":"a"}`)
	want = append(want, "hdm")
	body := `{"reason":"signout"}`
	for _, plan := range [][2]int{{4, 100}, {1, 100}, {8, 1}} {
		_ = plan
	}
	p.PassThenFail(6, 100) // the record and 5 cancels pass, the rest fail
	r := do(t, env, "POST", "/users/hu/actions/cancel", body, "Idempotency-Key", "hd-1")
	p.PassThenFail(0, 0)
	t.Logf("half-done: %d %s", r.Status, r.Raw)
	if r.Status != 503 {
		t.Fatalf("half-done cancel-all answered %d %s, want 503", r.Status, r.Raw)
	}
	p.PassThenDrop(3, 2) // some answers lost on the re-send
	again := do(t, env, "POST", "/users/hu/actions/cancel", body, "Idempotency-Key", "hd-1")
	p.PassThenDrop(0, 0)
	third := do(t, env, "POST", "/users/hu/actions/cancel", body, "Idempotency-Key", "hd-1")
	t.Logf("re-send: %d %s %s; third: %s", again.Status, again.Header.Get("Idempotent-Replayed"), again.Raw, third.Raw)
	if again.Status != 200 || again.Body["canceled"] != float64(len(want)) || third.Raw != again.Raw {
		t.Fatalf("re-send: %d %s, third %s", again.Status, again.Raw, third.Raw)
	}
	if c := do(t, env, "POST", "/actions/hdm/consume", `{"useId":"b"}`); c.Status != 410 {
		t.Fatalf("take after the cancel-all: %d %s", c.Status, c.Raw)
	}
	env.Settled(t)
	count := map[string]int{}
	for _, e := range env.Bus.Events() {
		var d struct{ ActionID, Reason string }
		if e.DetailType == "action.canceled" && json.Unmarshal(e.Detail, &d) == nil {
			count[d.ActionID]++
		}
	}
	for _, id := range want {
		if count[id] != 1 {
			t.Errorf("%s: %d action.canceled", id, count[id])
		}
	}
	t.Logf("events: %v", count)
}

// TestCancelAllRacingTakes: takes and consumes racing a keyed cancel-all over a user's
// multi-use and single-use actions.
func TestCancelAllRacingTakes(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	late, both, mismatched, takes, consumed, canceled := 0, 0, 0, 0, 0, 0
	const rounds = 15
	for round := range rounds {
		user := fmt.Sprintf("rt%d", round)
		mid := user + "-m"
		create(t, env, `{"actionId":"`+mid+`","userId":"`+user+`","maxUses":50}`)
		for i := range 6 {
			create(t, env, fmt.Sprintf(`{"actionId":"%s-s%d","userId":"%s"}`, user, i, user))
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var used []string
		consumedBy := map[string]int{}
		var all *testkit.Response
		start := make(chan struct{})
		for i := range 24 {
			wg.Go(func() {
				<-start
				time.Sleep(time.Duration(rand.Int64N(int64(15 * time.Millisecond))))
				r, err := testkit.Send(client, "POST", env.URL+"/actions/"+mid+"/consume", fmt.Sprintf(`{"useId":"u%d"}`, i))
				if err == nil && r.Status == 200 {
					mu.Lock()
					used = append(used, r.Str("usedAt"))
					mu.Unlock()
				}
			})
		}
		for i := range 12 {
			wg.Go(func() {
				<-start
				time.Sleep(time.Duration(rand.Int64N(int64(15 * time.Millisecond))))
				id := fmt.Sprintf("%s-s%d", user, i%6)
				r, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", ``)
				if err == nil && r.Status == 200 {
					mu.Lock()
					consumedBy[id]++
					mu.Unlock()
				}
			})
		}
		wg.Go(func() {
			<-start
			r, err := testkit.Send(client, "POST", env.URL+"/users/"+user+"/actions/cancel", `{"reason":"r"}`, "Idempotency-Key", "k-"+user)
			if err != nil || r.Status != 200 {
				t.Errorf("cancel-all: %v %v", err, r)
			}
			all = r
		})
		close(start)
		wg.Wait()
		listed := map[string]bool{}
		for _, id := range all.Body["actionIds"].([]any) {
			listed[id.(string)] = true
		}
		g := do(t, env, "GET", "/actions/"+mid, "")
		cAt := g.Str("canceledAt")
		if cAt == "" || !listed[mid] {
			t.Errorf("round %d: multi-use not canceled/listed: %s %s", round, g.Raw, all.Raw)
		}
		for _, u := range used {
			if u >= cAt {
				late++
			}
		}
		takes += len(used)
		if held := int(g.Body["usesHeld"].(float64)); held != len(used) {
			mismatched++
			t.Logf("round %d: usesHeld %d, 200 takes %d", round, held, len(used))
		}
		if r := do(t, env, "POST", "/actions/"+mid+"/consume", `{"useId":"after"}`); r.Status != 410 {
			t.Errorf("round %d: take after: %d %s", round, r.Status, r.Raw)
		}
		for i := range 6 {
			id := fmt.Sprintf("%s-s%d", user, i)
			g := do(t, env, "GET", "/actions/"+id, "")
			isC, isX := g.Str("consumedAt") != "", g.Str("canceledAt") != ""
			if isC == isX || isC && (consumedBy[id] != 1 || listed[id]) || isX && (consumedBy[id] != 0 || !listed[id]) {
				both++
				t.Logf("round %d %s: consumed %v canceled %v answers %d listed %v", round, id, isC, isX, consumedBy[id], listed[id])
			}
			if isC {
				consumed++
			} else {
				canceled++
			}
		}
		again := do(t, env, "POST", "/users/"+user+"/actions/cancel", `{"reason":"r"}`, "Idempotency-Key", "k-"+user)
		if again.Raw != all.Raw {
			t.Errorf("round %d: re-send %s, first %s", round, again.Raw, all.Raw)
		}
	}
	t.Logf("%d rounds: %d takes answered 200, %d stamped at/after canceledAt, %d usesHeld mismatches; single-use %d consumed %d canceled, %d inconsistent", rounds, takes, late, mismatched, consumed, canceled, both)
	if late+both+mismatched > 0 {
		t.Fatal("inconsistent")
	}
}

// TestSupersedeRaces: racing superseding creates of one user and kind (each also re-sent
// with its key at once, as a client that gave up waiting): exactly one open.
func TestSupersedeRaces(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	rounds := 40
	hist := map[int]int{}
	var resent503 atomic.Int32
	for round := range rounds {
		user := fmt.Sprintf("sr%d", round)
		n := 2 + round%3
		var wg sync.WaitGroup
		for g := range n {
			for range 1 + round%2 { // odd rounds: each create sent twice at once with its key
				wg.Go(func() {
					for try := 0; ; try++ { // a client re-sends a 503 with its key
						r, err := testkit.Send(client, "POST", env.URL+"/actions", fmt.Sprintf(`{"actionId":"%s-%d","userId":"%s","kind":"login","supersede":true}`, user, g, user), "Idempotency-Key", fmt.Sprintf("%s-%d", user, g))
						if err == nil && r.Status == 503 && try < 100 {
							resent503.Add(1)
							time.Sleep(100 * time.Millisecond)
							continue
						}
						if err != nil || r.Status != 201 {
							t.Errorf("create: %v %v", err, r)
						}
						return
					}
				})
			}
		}
		wg.Wait()
		open := 0
		for g := range n {
			if do(t, env, "GET", fmt.Sprintf("/actions/%s-%d", user, g), "").Str("state") == "active" {
				open++
			}
		}
		hist[open]++
		if open != 1 {
			t.Logf("round %d (%d creates, resent %v): %d open", round, n, round%2 == 1, open)
			for g := range n {
				r := do(t, env, "GET", fmt.Sprintf("/actions/%s-%d", user, g), "")
				t.Logf("  %s-%d created %s canceled %s", user, g, r.Str("createdAt"), r.Str("canceledAt"))
			}
			it := rawItem(t, env, "key#sup#login##"+user)
			for _, k := range []string{"latestKey", "prevKey", "latestMs"} {
				if v, ok := it[k].(*types.AttributeValueMemberS); ok {
					t.Logf("  pointer %s = %s", k, v.Value)
				} else if v, ok := it[k].(*types.AttributeValueMemberN); ok {
					t.Logf("  pointer %s = %s", k, v.Value)
				}
			}
		}
	}
	t.Logf("open actions per round: %v (503s re-sent: %d)", hist, resent503.Load())
	if hist[1] != rounds {
		t.Fatalf("rounds not leaving exactly one open: %v", hist)
	}
}

// TestSupersedeResentWhileFirstAttemptRuns: a superseding create a whose first attempt's pointer write is slow;
// meanwhile b (same user and kind, 100 ms later) is created, superseding,
// and a is re-sent with its key (the client gave up waiting). Then a's
// first attempt goes on. One of a and b must stay open.
func TestSupersedeResentWhileFirstAttemptRuns(t *testing.T) {
	t.Parallel()
	env, held := heldWrite(t)
	t0 := time.Now()
	apiA, apiB := *env.API, *env.API
	apiA.Now = func() time.Time { return t0 }
	apiB.Now = func() time.Time { return t0.Add(100 * time.Millisecond) }
	held.at.Store(held.last.Load() + 2) // a's create, then a's pointer write: held
	bodyA := `{"actionId":"ra","userId":"rw","kind":"login","supersede":true}`
	first := make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() {
		r, _ := apiA.Create(context.Background(), events.APIGatewayV2HTTPRequest{
			RouteKey: httpapi.RouteCreate, Body: bodyA, Headers: map[string]string{"idempotency-key": "ra-key"}})
		first <- r
	}()
	<-held.blocked
	createOn(t, &apiB, `{"actionId":"rb","userId":"rw","kind":"login","supersede":true}`, "rb-key")
	send := func() events.APIGatewayV2HTTPResponse {
		r, _ := apiA.Create(context.Background(), events.APIGatewayV2HTTPRequest{
			RouteKey: httpapi.RouteCreate, Body: bodyA, Headers: map[string]string{"idempotency-key": "ra-key"}})
		return r
	}
	resent := send() // while the first attempt is held
	close(held.resume)
	r1 := <-first
	if resent.StatusCode != 201 {
		t.Logf("re-send while the first attempt ran: %d %s", resent.StatusCode, resent.Body)
		resent = send() // the client's next re-send
	}
	sa, sb := do(t, env, "GET", "/actions/ra", ""), do(t, env, "GET", "/actions/rb", "")
	t.Logf("a re-sent: %d %v; a first: %d", resent.StatusCode, resent.Headers[httpapi.HeaderReplayed], r1.StatusCode)
	t.Logf("a %s", sa.Raw)
	t.Logf("b %s", sb.Raw)
	if sa.Str("state") != "active" && sb.Str("state") != "active" {
		t.Fatalf("neither a nor b is open: a %s/%s, b %s/%s", sa.Str("state"), sa.Str("cancelReason"), sb.Str("state"), sb.Str("cancelReason"))
	}
	if sa.Str("state") == "active" && sb.Str("state") == "active" {
		t.Fatalf("both open")
	}
}

// TestSupersedeCancelStampedAfterCreate: concurrent superseding creates on one instance (real clock): no
// action is stamped canceled before it was created.
func TestSupersedeCancelStampedAfterCreate(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	bad, total := 0, 0
	for round := range 20 {
		user := fmt.Sprintf("st%d", round)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				testkit.Send(client, "POST", env.URL+"/actions", fmt.Sprintf(`{"actionId":"%s-%d","userId":"%s","kind":"login","supersede":true}`, user, g, user))
			})
		}
		wg.Wait()
		for g := range 4 {
			r := do(t, env, "GET", fmt.Sprintf("/actions/%s-%d", user, g), "")
			if c := r.Str("canceledAt"); c != "" {
				total++
				if c < r.Str("createdAt") {
					bad++
					t.Logf("%s-%d: createdAt %s canceledAt %s", user, g, r.Str("createdAt"), c)
				}
			}
		}
	}
	t.Logf("%d of %d superseded actions stamped canceled before their createdAt", bad, total)
	if bad > 0 {
		t.Fatal("canceledAt before createdAt")
	}
}

// TestSupersedeStampsItsCancelWhenWritten: real clocks, one instance. a's pointer write is slow (held until b,
// created after it, has been written and answered); a's write then takes
// the pointer from b and cancels b: b's canceledAt must not be before b
// was created (nor before the cancel was written).
func TestSupersedeStampsItsCancelWhenWritten(t *testing.T) {
	t.Parallel()
	env, held := heldWrite(t)
	create(t, env, `{"actionId":"warm","userId":"wu2","kind":"login","supersede":true}`)
	held.at.Store(held.last.Load() + 2)
	first := make(chan *testkit.Response, 1)
	go func() {
		r, _ := testkit.Send(client, "POST", env.URL+"/actions", `{"actionId":"wa","userId":"wu","kind":"login","supersede":true}`)
		first <- r
	}()
	<-held.blocked
	time.Sleep(20 * time.Millisecond)
	b := do(t, env, "POST", "/actions", `{"actionId":"wb","userId":"wu","kind":"login","supersede":true}`)
	bAnswered := time.Now().UTC()
	close(held.resume)
	<-first
	g := do(t, env, "GET", "/actions/wb", "")
	t.Logf("a: %s", do(t, env, "GET", "/actions/wa", "").Raw)
	t.Logf("b created %s (answered %s), b now %s canceledAt %s", b.Str("createdAt"), bAnswered.Format(time.RFC3339Nano), g.Str("state"), g.Str("canceledAt"))
	if c := g.Str("canceledAt"); c != "" && c < b.Str("createdAt") {
		t.Fatalf("b canceled at %s, before it was created at %s", c, b.Str("createdAt"))
	}
}

func costIs(t *testing.T, env *testkit.Env, what string, r *testkit.Response, status int, want map[string]int) {
	t.Helper()
	got := env.Counter.Take()
	if r.Status != status || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: %d, DynamoDB requests = %v, want %d and %v", what, r.Status, got, status, want)
	}
}

// TestCancelAllResentAfterNewAction: a keyed cancel-all re-sent after a new action of the user was created.
func TestCancelAllResentAfterNewAction(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.WithEvents)
	create(t, env, `{"actionId":"n1","userId":"nu"}`)
	first := do(t, env, "POST", "/users/nu/actions/cancel", `{}`, "Idempotency-Key", "n-1")
	create(t, env, `{"actionId":"n2","userId":"nu"}`)
	again := do(t, env, "POST", "/users/nu/actions/cancel", `{}`, "Idempotency-Key", "n-1")
	g := do(t, env, "GET", "/actions/n2", "")
	t.Logf("first %s re-send %s %s; n2 %s", strings.TrimSpace(first.Raw), again.Header.Get("Idempotent-Replayed"), strings.TrimSpace(again.Raw), g.Str("state"))
}

// writeHold holds the UpdateItem numbered at (once set) until resume is
// closed; last is the number of the latest one.
type writeHold struct {
	at, last        atomic.Int32
	blocked, resume chan struct{}
}

// heldWrite is an env whose writes go through a writeHold.
func heldWrite(t *testing.T) (*testkit.Env, *writeHold) {
	h := &writeHold{blocked: make(chan struct{}), resume: make(chan struct{})}
	env, _ := hooked(t, func(n int32) {
		h.last.Store(n)
		if n == h.at.Load() {
			close(h.blocked)
			<-h.resume
		}
	})
	return env, h
}
