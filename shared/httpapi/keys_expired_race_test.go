package httpapi_test

// A claim of a key past its retention (its item not yet deleted by TTL)
// takes two conditional writes: the first one's refusal shows the item
// expired, the second replaces it. Between the two, another caller may
// revive the key and already be done with it.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
)

// TestKeyClaimAfterRetentionMeetsAReleaseInBetween: a claim of an expired
// key whose replacing write meets a key another caller has meanwhile
// claimed anew and released ("claimable again at once", docs/http-api.md)
// takes the key: 201 with a token that completes it. Before the fix it
// answered 500 internal: the replacing write's refusal was explained as if
// the usual claim had been refused, and a released key refuses no claim.
func TestKeyClaimAfterRetentionMeetsAReleaseInBetween(t *testing.T) {
	t.Parallel()
	var env *testkit.Env
	var armed atomic.Int32 // the UpdateItem before which the other caller acts
	other := make(chan *testkit.Response, 2)
	env, _ = hooked(t, func(n int32) {
		if n != armed.Load() {
			return
		}
		// In the proxy's goroutine: errors surface through the channel.
		c, err := testkit.Send(client, "POST", env.URL+"/keys/exp/claim", `{"fingerprint":"f"}`)
		if err != nil {
			other <- &testkit.Response{Raw: err.Error()}
			other <- &testkit.Response{}
			return
		}
		other <- c
		r, err := testkit.Send(client, "POST", env.URL+"/keys/exp/release", `{"token":"`+c.Str("token")+`","error":"declined"}`)
		if err != nil {
			r = &testkit.Response{Raw: err.Error()}
		}
		other <- r
	})
	first := claim(t, env, "exp", `{"fingerprint":"f"}`)                                                                   // UpdateItem 1
	if r := do(t, env, "POST", "/keys/exp/complete", `{"token":"`+first.Str("token")+`","response":1}`); r.Status != 200 { // 2
		t.Fatalf("complete: %d %s", r.Status, r.Raw)
	}
	env.Shift(25 * time.Hour) // past the key's retention; DynamoDB TTL has not deleted the item
	// The claim's first write (3) is refused: the item expired. Before its
	// replacing write (4) goes out, another caller claims the key anew (5
	// refused, 6 replaces) and releases it (7).
	armed.Store(4)
	r := claim(t, env, "exp", `{"fingerprint":"f"}`)
	c, rel := <-other, <-other
	if c.Status != 201 || rel.Status != 200 || rel.Str("state") != "failed" {
		t.Fatalf("the other caller: claim %d %s, release %d %s", c.Status, c.Raw, rel.Status, rel.Raw)
	}
	if r.Status != 201 || r.Str("state") != "in_progress" || len(r.Str("token")) != 32 || r.Str("token") == c.Str("token") {
		t.Fatalf("a claim of a released key: %d %s, want 201 with a new token (the key was released: %s)", r.Status, r.Raw, rel.Raw)
	}
	if r.Body["attempts"] != 2.0 || r.Body["failures"] != 1.0 {
		t.Fatalf("the claim after the other caller's attempt: %s, want attempts 2, failures 1", r.Raw)
	}
	// The token holds the key: a claim meanwhile is in_progress, and the
	// holder completes it.
	if b := claim(t, env, "exp", `{"fingerprint":"f"}`); b.Status != 409 || b.Str("error") != "in_progress" {
		t.Fatalf("a claim while the new holder runs: %d %s", b.Status, b.Raw)
	}
	if d := do(t, env, "POST", "/keys/exp/complete", `{"token":"`+r.Str("token")+`","response":{"n":2}}`); d.Status != 200 || d.Str("state") != "completed" {
		t.Fatalf("the new holder's complete: %d %s", d.Status, d.Raw)
	}
}

// TestKeyClaimsRaceOnExpiredKeysWhileWinnersRelease: many callers claim
// keys past their retention at once, and each winner releases at once (an
// effect that failed fast): every claim is answered 201 or 409 in_progress
// (docs/http-api.md), never 500, and every 201's token is its own. Before
// the fix a few claims in a thousand answered 500 (printed below).
func TestKeyClaimsRaceOnExpiredKeysWhileWinnersRelease(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	keys, callers := testkit.Scale(40), 24
	for i := range keys {
		k := fmt.Sprintf("x%d", i)
		c := claim(t, env, k, `{"fingerprint":"f"}`)
		if r := do(t, env, "POST", "/keys/"+k+"/release", `{"token":"`+c.Str("token")+`","error":"declined"}`); r.Status != 200 {
			t.Fatalf("release: %d %s", r.Status, r.Raw)
		}
	}
	env.Shift(25 * time.Hour) // every key past its retention, its item still there
	var mu sync.Mutex
	statuses, tokens := map[int]int{}, map[string]bool{}
	var odd []string
	var wg sync.WaitGroup
	for i := range keys {
		k := fmt.Sprintf("x%d", i)
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// An hour's lease: under load a winner's release may come
				// minutes after its claim, and a lapsed lease would be taken
				// over (its release then rightly lease_lost).
				r, err := testkit.Send(client, "POST", env.URL+"/keys/"+k+"/claim", `{"fingerprint":"f","leaseSeconds":3600}`)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				statuses[r.Status]++
				switch {
				case r.Status == 201 && !tokens[r.Str("token")]:
					tokens[r.Str("token")] = true
				case r.Status == 409 && r.Str("error") == "in_progress":
				default:
					odd = append(odd, fmt.Sprintf("%s: %d %s", k, r.Status, r.Raw))
				}
				mu.Unlock()
				if r.Status == 201 {
					if rel, err := testkit.Send(client, "POST", env.URL+"/keys/"+k+"/release", `{"token":"`+r.Str("token")+`"}`); err != nil || rel.Status != 200 {
						t.Errorf("the winner's release: %v %v", err, rel)
					}
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d claims on %d expired keys, winners releasing at once: statuses %v", keys*callers, keys, statuses)
	if len(odd) > 0 {
		t.Fatalf("%d claims answered other than 201 with a token of its own or 409 in_progress, e.g. %s", len(odd), odd[0])
	}
	if statuses[201] < keys {
		t.Fatalf("%d claims won on %d keys: every key was claimable", statuses[201], keys)
	}
}
