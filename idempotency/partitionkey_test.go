package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/dynamostore"
)

// TestAnyPartitionKeyNameHoldsTheKey: a table whose partition key name holds
// a dot is a table like any other: a key held by one claim refuses another
// (in_progress), its holder completes it, and it then replays. (An
// expression that read the name as a path would find no such attribute, and
// let the second claim take a held key.)
func TestAnyPartitionKeyNameHoldsTheKey(t *testing.T) {
	needDynamoDB(t)
	ctx := context.Background()
	for _, pk := range []string{"my.pk", "a.b.c"} {
		t.Run(pk, func(t *testing.T) {
			name := "idem-pk-" + time.Now().Format("150405.000000")
			if err := dynamostore.CreateTable(ctx, localDynamoDB(), name, pk); err != nil {
				t.Fatal(err)
			}
			table := &dynamostore.Table{DB: localDynamoDB(), Name: name, PartitionKey: pk}
			now := time.Now()
			first := idempotency.Claim{Now: now, Fingerprint: "f", Lease: time.Minute, Token: idempotency.NewToken()}
			if _, err := table.Claim(ctx, "order-1", first); err != nil {
				t.Fatalf("first claim: %v", err)
			}
			second := first
			second.Token = idempotency.NewToken()
			var r *idempotency.Rejection
			if _, err := table.Claim(ctx, "order-1", second); !errors.As(err, &r) || r.Code != idempotency.CodeInProgress {
				t.Fatalf("a second claim of a held key: %v, want in_progress", err)
			}
			if _, err := table.Complete(ctx, "order-1", first.Token, []byte(`"done"`), now); err != nil {
				t.Fatalf("complete: %v", err)
			}
			var replay *idempotency.Replay
			if _, err := table.Claim(ctx, "order-1", second); !errors.As(err, &replay) {
				t.Fatalf("a claim of the completed key: %v, want its replay", err)
			}
		})
	}
}

// TestBracketedPartitionKeyNameIsRefused: a name the expression builder
// would read as a list index ("pk[0]") is refused before any write, never
// written under a condition that cannot hold the key.
func TestBracketedPartitionKeyNameIsRefused(t *testing.T) {
	needDynamoDB(t)
	ctx := context.Background()
	name := "idem-pk-brackets"
	if err := dynamostore.CreateTable(ctx, localDynamoDB(), name, "pk[0]"); err != nil {
		t.Fatal(err)
	}
	table := &dynamostore.Table{DB: localDynamoDB(), Name: name, PartitionKey: "pk[0]"}
	claim := idempotency.Claim{Now: time.Now(), Fingerprint: "f", Lease: time.Minute, Token: idempotency.NewToken()}
	if _, err := table.Claim(ctx, "order-1", claim); !errors.Is(err, dynamostore.ErrPartitionKeyName) {
		t.Fatalf("claim on a table keyed pk[0]: %v, want ErrPartitionKeyName", err)
	}
	if _, err := table.Get(ctx, "order-1", time.Now()); !errors.As(err, new(*idempotency.Rejection)) {
		t.Fatalf("nothing was written, so the key is not found: %v", err)
	}
}
