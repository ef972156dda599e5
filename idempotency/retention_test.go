package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/dynamostore"
)

// TestHolderCannotReviveAKeyPastItsRetention: once a key's retention has
// ended it reads as not found and is claimed anew as a fresh record, even
// while DynamoDB TTL has not deleted the item yet (that takes up to days).
// Its old holder's complete or release is then key_not_found and writes
// nothing. (Before, both landed: the complete answered 200 and brought the
// key back completed, with its old fingerprint, so a new claim with
// another one was refused fingerprint_mismatch.)
func TestHolderCannotReviveAKeyPastItsRetention(t *testing.T) {
	table, _ := newTable(t)
	table.Retention = time.Hour
	ctx := context.Background()
	now := time.Now()
	later := now.Add(3 * time.Hour) // past the lease and the retention after it
	for _, finish := range []string{"complete", "release"} {
		t.Run(finish, func(t *testing.T) {
			name := "k-" + finish
			rec, err := table.Claim(ctx, name, idempotency.Claim{Now: now, Fingerprint: "first", Lease: time.Second, Token: idempotency.NewToken()})
			if err != nil {
				t.Fatal(err)
			}
			if finish == "complete" {
				_, err = table.Complete(ctx, name, rec.Token, []byte(`"late"`), later)
			} else {
				_, err = table.Release(ctx, name, rec.Token, "late", later)
			}
			if !notFound(err) {
				t.Fatalf("%s by the old holder past the retention: %v, want key_not_found", finish, err)
			}
			if _, err := table.Get(ctx, name, later); !notFound(err) {
				t.Fatalf("get past the retention: %v, want key_not_found", err)
			}
			fresh, err := table.Claim(ctx, name, idempotency.Claim{Now: later, Fingerprint: "second", Lease: time.Second, Token: idempotency.NewToken()})
			if err != nil {
				t.Fatalf("a new claim with another fingerprint: %v", err)
			}
			if fresh.Attempts != 1 || fresh.Failures != 0 || fresh.LastError != "" || !fresh.CompletedAt.IsZero() {
				t.Fatalf("the new claim's record %+v, want a fresh one", fresh)
			}
		})
	}
}

func notFound(err error) bool {
	var rej *idempotency.Rejection
	return errors.As(err, &rej) && rej.Code == idempotency.CodeNotFound
}

// beforeWrite runs hook before the nth UpdateItem that crosses it (from 1).
type beforeWrite struct {
	next aws.HTTPClient
	n    atomic.Int32
	at   int32
	hook func()
}

func (b *beforeWrite) Do(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem") && b.n.Add(1) == b.at {
		b.hook()
	}
	return b.next.Do(r)
}

// TestClaimPastRetentionMeetsAReleaseInBetween: a claim of a key past its
// retention (its item not yet deleted by TTL) takes two writes, the first
// refused because the item expired, the second replacing it. When another
// caller claims the key anew and releases it between the two, the key is
// claimable ("release it after a failure: claimable again at once"): the
// claim is granted. Before, the replacing write's refusal was explained as
// the first write's, no reason fitted a released key, and the claim failed
// ("refused for no reason the key's record shows"; the service's 500).
func TestClaimPastRetentionMeetsAReleaseInBetween(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	later := now.Add(3 * time.Hour) // past the lease and the retention after it
	var other *dynamostore.Table
	var otherErr error
	gate := &beforeWrite{at: 3} // 1: the first claim; 2: the late claim's first write; 3: its replacing write
	gate.hook = func() {
		rec, err := other.Claim(ctx, "k", idempotency.Claim{Now: later, Fingerprint: "f", Lease: time.Minute, Token: idempotency.NewToken()})
		if err == nil {
			_, err = other.Release(ctx, "k", rec.Token, "declined", later)
		}
		otherErr = err
	}
	table, _ := newTable(t, func(next aws.HTTPClient) aws.HTTPClient { gate.next = next; return gate })
	table.Retention = time.Hour
	other = dynamostore.New(localDynamoDB(), table.Name)
	other.Retention = time.Hour
	if _, err := table.Claim(ctx, "k", idempotency.Claim{Now: now, Fingerprint: "f", Lease: time.Second, Token: idempotency.NewToken()}); err != nil {
		t.Fatal(err)
	}
	rec, err := table.Claim(ctx, "k", idempotency.Claim{Now: later, Fingerprint: "f", Lease: time.Minute, Token: idempotency.NewToken()})
	if otherErr != nil {
		t.Fatalf("the other caller's claim and release: %v", otherErr)
	}
	if err != nil {
		t.Fatalf("a claim of a key released in between: %v, want it granted", err)
	}
	if rec.Attempts != 2 || rec.Failures != 1 {
		t.Fatalf("the claim's record %+v, want attempts 2 and failures 1 (the other caller's release counted)", rec)
	}
}
