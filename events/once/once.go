// Package once is the idempotent-consumer helper for ExactOnce subscribers:
// it runs a handler at most once per event id, however often EventBridge
// delivers the event.
//
// It is the idempotency library (package idempotency) keyed by event id, on
// a DynamoDB table of its own (partition key "eventId" of type S, TTL on
// "ttl"), so it runs the same claim / complete / release writes as the
// library and the service's /keys routes (idempotency/dynamostore), one
// conditional UpdateItem each. The claim holds a lease:
//   - the handler succeeds: the claim is completed and every later delivery
//     is acknowledged without running it;
//   - the handler fails (error or panic): the claim is released so the
//     redelivery runs it again;
//   - the process dies mid-handler: the lease lapses and the next delivery
//     takes the claim over.
//
// A delivery that arrives while another holder's lease runs gets
// ErrInProgress: return it so the event is redelivered later.
//
// The one gap no claim table closes: a handler whose effect lands but whose
// process dies before the "done" write is run again after its lease. Make
// such effects idempotent themselves (e.g. a conditional write keyed by the
// event id) when twice is worse than late.
package once

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/dynamostore"
)

// Defaults.
const (
	// DefaultLease applies when neither Guard.Lease nor a context deadline
	// bounds the handler.
	DefaultLease = 5 * time.Minute
	// DefaultRetention keeps a done claim past EventBridge's longest retry
	// window (24 h) and Lambda's asynchronous retries, with margin.
	DefaultRetention = 7 * 24 * time.Hour
	// leaseMargin is added to a context deadline: the invocation is over by then.
	leaseMargin = 5 * time.Second
)

// Errors.
var (
	// ErrInProgress: another delivery of the same event holds a live claim.
	// Fail the delivery so it is retried; by then the holder has finished
	// (the retry is acknowledged) or failed (the retry runs the handler).
	ErrInProgress = idempotency.ErrInProgress
	// ErrLeaseLost: the handler ran longer than its lease and another
	// delivery took the claim over, so the handler may have run twice. Raise
	// the lease above the handler's longest run.
	ErrLeaseLost = idempotency.ErrLeaseLost
)

// API is the part of the DynamoDB client the guard uses; *dynamodb.Client has it.
type API = dynamostore.API

// Guard claims event ids in one table.
type Guard struct {
	DB    API
	Table string
	// Lease bounds how long a claim stays with a holder that has not
	// finished. Zero: until the context's deadline (a Lambda invocation's
	// timeout) plus a margin, or DefaultLease without a deadline.
	Lease time.Duration
	// Retention is how long a done claim is kept (its DynamoDB TTL).
	// Zero: DefaultRetention.
	Retention time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// New returns a Guard on table with the defaults.
func New(db API, table string) *Guard { return &Guard{DB: db, Table: table} }

// PartitionKey is the claims table's partition key.
const PartitionKey = "eventId"

// eventFingerprint is every claim's fingerprint: an event id names one
// event, there is no payload to compare.
const eventFingerprint = "event"

// Do runs fn unless the event id was already handled. ran reports whether fn
// ran in this call. err is nil when fn succeeded or had succeeded before;
// fn's own error when it failed (the claim is released); ErrInProgress,
// ErrLeaseLost, or a DynamoDB error otherwise. A panic in fn releases the
// claim and panics on.
func (g *Guard) Do(ctx context.Context, eventID string, fn func(context.Context) error) (ran bool, err error) {
	if eventID == "" {
		return false, errors.New("once: empty event id")
	}
	table := &dynamostore.Table{DB: g.DB, Name: g.Table, PartitionKey: PartitionKey, Retention: g.retention()}
	call := idempotency.Call{Key: eventID, Fingerprint: eventFingerprint, Lease: g.lease(ctx, g.now()), Now: g.Now}
	_, err = idempotency.Run(ctx, table, call, func(ctx context.Context) ([]byte, error) {
		ran = true
		if err := fn(ctx); err != nil {
			return nil, err
		}
		return []byte("true"), nil
	})
	if errors.Is(err, idempotency.ErrPayloadMismatch) {
		// Only a claim written before this package ran on the library (it
		// has no fingerprint; state "done" or "running") meets this: count
		// it handled rather than redeliver the event until its TTL.
		return false, nil
	}
	return ran, err
}

func (g *Guard) lease(ctx context.Context, now time.Time) time.Duration {
	if g.Lease > 0 {
		return g.Lease
	}
	if d, ok := ctx.Deadline(); ok {
		return d.Sub(now) + leaseMargin
	}
	return DefaultLease
}

func (g *Guard) retention() time.Duration {
	if g.Retention > 0 {
		return g.Retention
	}
	return DefaultRetention
}

func (g *Guard) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// CreateTable makes a claims table (key eventId, on-demand, TTL on ttl) for
// local runs and tests; the CDK app makes the deployed one. An existing
// table is left as it is.
func CreateTable(ctx context.Context, db *dynamodb.Client, name string) error {
	return dynamostore.CreateTable(ctx, db, name, PartitionKey)
}
