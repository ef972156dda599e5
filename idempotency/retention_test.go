package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/exactonce/exactonce/idempotency"
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
