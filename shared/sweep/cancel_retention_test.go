package sweep_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/sweep"
)

// TestHalfCancelKeepsItsGatesAsLongAsTheAction: a cancel of a multi-use action closes
// its gates (ttl = cancel + retention) and then fails on the action's own
// write. The docs: "A take that finds a gate closed by a cancel that
// stopped half way finishes that cancel." When the action lives longer
// than the retention after that cancel, its closed gates pass their ttl
// while the action is still open: the purge (or TTL) deletes them, and a
// take finds no closed gate: it is taken again, beyond maxUses.
func TestHalfCancelKeepsItsGatesAsLongAsTheAction(t *testing.T) {
	t.Parallel()
	for name, purge := range map[string]bool{"purged": true, "left": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			halfCancel(t, purge)
		})
	}
}

// halfCancel: with purge, the purge deletes the closed gate; without, it is
// still in the table (as on a table with TTL, before TTL gets to it).
func halfCancel(t *testing.T, purge bool) {
	p, err := faults.Start(testkit.DynamoDB(t), faults.Rates{}, 1, "UpdateItem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	env := testkit.NewEnv(t, func(o *server.Options) {
		o.Retention = time.Hour
		o.AWS.BaseEndpoint = aws.String(p.URL)
	})
	now := time.Now()
	expiresAt := now.Add(5 * time.Hour)
	r := testkit.Do(t, nil, "POST", env.URL+"/actions",
		fmt.Sprintf(`{"actionId":"lic","userId":"u","maxUses":2,"expiresAt":%q}`, expiresAt.UTC().Format(time.RFC3339Nano)))
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	for _, u := range []string{"a", "b"} {
		if r := testkit.Do(t, nil, "POST", env.URL+"/actions/lic/consume", `{"useId":"`+u+`"}`); r.Status != 200 {
			t.Fatalf("take %s: %d %s", u, r.Status, r.Raw)
		}
	}
	// The cancel: its first write (single-use condition) is refused, the
	// gate is closed, then the action's write fails for good.
	p.PassThenFail(2, 100)
	c := testkit.Do(t, nil, "POST", env.URL+"/actions/lic/cancel", "")
	p.PassThenFail(0, 0)
	t.Logf("cancel: %d %s", c.Status, c.Raw)
	if c.Status != 503 {
		t.Fatalf("cancel answered %d, want the 503 of a cancel that stopped half way", c.Status)
	}
	g := testkit.Do(t, nil, "GET", env.URL+"/actions/lic", "")
	t.Logf("GET after the half cancel: %s", g.Raw)

	// Two hours later (retention 1 h): the action is open until +5 h.
	later := now.Add(2 * time.Hour)
	if purge {
		pr := &sweep.Purger{Store: env.Sweeper.Store, Segments: 2, Now: func() time.Time { return later }}
		res, err := pr.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("purge at +2h: %+v", res)
	}
	env.Shift(2 * time.Hour)
	b := testkit.Do(t, nil, "POST", env.URL+"/actions/lic/consume", `{"useId":"c"}`)
	g = testkit.Do(t, nil, "GET", env.URL+"/actions/lic", "")
	t.Logf("GET at +2h: %s", g.Raw)
	t.Logf("take c at +2h: %d %s", b.Status, b.Raw)
	if b.Status != 410 || b.Str("error") != "canceled" {
		t.Fatalf("take c past the cancel's retention: %d %s; want 410 canceled (a maxUses 2 action whose cancel closed its gates)", b.Status, b.Raw)
	}
}
