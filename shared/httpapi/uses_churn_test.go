package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
)

// device is a device id as long as ids go (a serial number and a model).
var device = "laptop-" + strings.Repeat("0123456789abcdef", 7) + "-x1"

// churn activates and deactivates one device on a licence n times, each
// call with its own Idempotency-Key (as the Go client sends), and says what
// went wrong on any answer but 200.
func churn(env *testkit.Env, id string, n int) error {
	for i := range n {
		take, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/consume", `{"useId":"`+device+`"}`, "Idempotency-Key", fmt.Sprintf("%s-activate-%d", id, i))
		if err != nil || take.Status != 200 {
			return fmt.Errorf("cycle %d of %s: take %v %v", i, id, err, take)
		}
		rel, err := testkit.Send(client, "POST", env.URL+"/actions/"+id+"/uses/"+device+"/release", ``, "Idempotency-Key", fmt.Sprintf("%s-deactivate-%d", id, i))
		if err != nil || rel.Status != 200 {
			return fmt.Errorf("cycle %d of %s: release %v %v", i, id, err, rel)
		}
	}
	return nil
}

// TestLicenceChurnStaysRevocable: a 1-seat releasable licence whose device
// activates and deactivates with keys 1,000 times can still be revoked: the
// cancel answers 200, a take after it 410 canceled; another licence churned
// past the size the single-item design could hold is canceled by its
// user's cancel-all, and a third is marked expired by the sweeper (its
// action.expired published). With every use and key kept on the action's
// one item, that item reached 400 KB after about 400 cycles and every one
// of these answered 500 while a take of a new useId was still accepted.
func TestLicenceChurnStaysRevocable(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.On(testkit.OwnDynamoDB(t)), testkit.WithEvents)
	create(t, env, `{"actionId":"lic-a","userId":"acme","maxUses":1,"releasable":true}`)
	create(t, env, `{"actionId":"lic-b","userId":"globex","maxUses":1,"releasable":true}`)
	create(t, env, fmt.Sprintf(`{"actionId":"lic-c","userId":"initech","maxUses":1,"releasable":true,"expiresAt":%q}`,
		time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
	cycles, past := testkit.Scale(1000), testkit.Scale(450)
	var wg sync.WaitGroup // the three licences churn at once
	errs := make(chan error, 3)
	for id, n := range map[string]int{"lic-a": cycles, "lic-b": past, "lic-c": past} {
		wg.Go(func() { errs <- churn(env, id, n) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	if r := do(t, env, "POST", "/actions/lic-a/cancel", `{"reason":"revoked"}`, "Idempotency-Key", "revoke-a"); r.Status != 200 {
		t.Fatalf("cancel after %d keyed cycles: %d %s", cycles, r.Status, r.Raw)
	}
	if r := do(t, env, "POST", "/actions/lic-a/consume", `{"useId":"desktop"}`); r.Status != 410 || r.Str("error") != "canceled" {
		t.Fatalf("a new device after the revocation: %d %s", r.Status, r.Raw)
	}
	if r := do(t, env, "POST", "/users/globex/actions/cancel", `{}`, "Idempotency-Key", "revoke-b"); r.Status != 200 {
		t.Fatalf("cancel-all of a churned licence: %d %s", r.Status, r.Raw)
	}
	if r := do(t, env, "POST", "/actions/lic-b/consume", `{"useId":"desktop"}`); r.Status != 410 {
		t.Fatalf("a new device after the cancel-all: %d %s", r.Status, r.Raw)
	}
	env.Sweeper.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	res, err := env.Sweeper.Run(context.Background())
	if err != nil || res.Expired < 1 {
		t.Fatalf("sweep of a churned licence: %+v, %v", res, err)
	}
	if g := do(t, env, "GET", "/actions/lic-c", ""); g.Str("expiredAt") == "" {
		t.Fatalf("the churned licence was not marked expired: %s", g.Raw)
	}
	deadline := time.Now().Add(testkit.Patience)
	for {
		n := 0
		for _, e := range env.Bus.Events() {
			if e.DetailType == "action.expired" {
				n++
			}
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d action.expired events, want 1", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
