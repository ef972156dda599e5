package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/aws/smithy-go"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/dynamostore"
)

// KeyPrefix starts the partition key of every idempotency-key item. '#' is
// outside the action id alphabet, so a key item and an action never share
// an item, and the stream publisher can tell them apart.
const KeyPrefix = "key#"

// IsKeyItem reports whether a partition key value is an idempotency key's.
func IsKeyItem(pk string) bool { return strings.HasPrefix(pk, KeyPrefix) }

// The key transitions are idempotency/dynamostore's, the same code the
// idempotency library and events/once run, on this table under KeyPrefix.
// These methods only map dependency faults to ErrUnavailable (503).

func (st *Store) keyTable() *dynamostore.Table {
	return &dynamostore.Table{DB: st.db, Name: st.table, PartitionKey: attrID, Prefix: KeyPrefix, Retention: st.keyRetention}
}

// ClaimKey takes the key for one holder with one conditional write (see
// dynamostore.Table.Claim).
func (st *Store) ClaimKey(ctx context.Context, name string, c idempotency.Claim) (*idempotency.Record, error) {
	k, err := st.keys.Claim(ctx, name, c)
	return k, keyErr(err)
}

// CompleteKey stores the response of the holder of token with one
// conditional write; the key then replays it until its retention ends.
func (st *Store) CompleteKey(ctx context.Context, name, token string, response []byte, now time.Time) (*idempotency.Record, error) {
	k, err := st.keys.Complete(ctx, name, token, response, now)
	return k, keyErr(err)
}

// ReleaseKey gives the key up after a failed attempt, with one conditional
// write: it is claimable again at once, and its failure count grows.
func (st *Store) ReleaseKey(ctx context.Context, name, token, errText string, now time.Time) (*idempotency.Record, error) {
	k, err := st.keys.Release(ctx, name, token, errText, now)
	return k, keyErr(err)
}

// GetKey reads a key with a strongly consistent read; a key past its
// retention reads as not found.
func (st *Store) GetKey(ctx context.Context, name string, now time.Time) (*idempotency.Record, error) {
	k, err := st.keys.Get(ctx, name, now)
	return k, keyErr(err)
}

// keyErr classifies the SDK's errors like every other store call; the
// domain's answers and decoding errors pass unchanged.
func keyErr(err error) error {
	var op *smithy.OperationError
	if err != nil && errors.As(err, &op) {
		return classifyErr(err)
	}
	return err
}
