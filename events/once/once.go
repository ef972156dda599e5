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
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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
	// ErrInProgress: another delivery of the same event holds a live claim,
	// or this delivery's claim was answered after half its lease (the
	// handler did not run; the claim is released). Fail the delivery so
	// it is retried; by then the holder has finished (the retry is
	// acknowledged) or failed (the retry runs the handler).
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
// claim and panics on. An event id that is empty or not UTF-8 text is an
// error (fn does not run).
func (g *Guard) Do(ctx context.Context, eventID string, fn func(context.Context) error) (ran bool, err error) {
	return g.do(ctx, eventID, fn, false)
}

func (g *Guard) do(ctx context.Context, eventID string, fn func(context.Context) error, again bool) (ran bool, err error) {
	if eventID == "" {
		return false, errors.New("once: empty event id")
	}
	if !utf8.ValidString(eventID) {
		// The claim's key is a DynamoDB string: the SDK would write each
		// byte that is not UTF-8 as U+FFFD, and other ids would name this
		// event's claim (one of them acknowledged, never run).
		return false, errors.New("once: event id is not UTF-8 text")
	}
	table := &dynamostore.Table{DB: g.DB, Name: g.Table, PartitionKey: PartitionKey, Retention: g.retention()}
	call := idempotency.Call{Key: eventID, Fingerprint: eventFingerprint, Lease: g.lease(ctx, g.now()), Now: g.Now}
	_, err = idempotency.Run(ctx, table, call, func(ctx context.Context) ([]byte, error) {
		ran = true
		if err := fn(ctx); err != nil {
			return nil, &handlerError{err}
		}
		return []byte("true"), nil
	})
	if h := (*handlerError)(nil); errors.As(err, &h) {
		return ran, h.unwrapIn(err)
	}
	if !errors.Is(err, idempotency.ErrPayloadMismatch) {
		return ran, err
	}
	// Only a claim the package wrote before it ran on the library (no
	// fingerprint; state "done" or "running") meets this.
	if again { // freed, then met again: leave it to a later delivery
		return false, ErrInProgress
	}
	switch old, err := g.freeLapsedLegacy(ctx, eventID); {
	case err != nil:
		return false, err
	case old == legacyFreed:
		return g.do(ctx, eventID, fn, true)
	case old == legacyRunning:
		return false, ErrInProgress
	}
	return false, nil // done
}

// handlerError carries fn's error through idempotency.Run without
// unwrapping to it, so every failure of fn releases the claim: Run would
// keep a key held for the rest of its retention on an error that wraps
// idempotency.ErrResponseNotStored (a response it could not store), which
// a handler's error may wrap when it passes up its own use of the library;
// an event has no response to store.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }

// unwrapIn returns Run's error with fn's own in place of e: e itself, or e
// joined with a failed release.
func (e *handlerError) unwrapIn(err error) error {
	if err == error(e) {
		return e.err
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := append([]error(nil), j.Unwrap()...)
		for i := range errs {
			errs[i] = e.unwrapIn(errs[i])
		}
		return errors.Join(errs...)
	}
	return err
}

// What freeLapsedLegacy found.
const (
	legacyDone    = iota // handled
	legacyRunning        // its holder's lease runs
	legacyFreed          // its lease had lapsed (the holder died): freed for a claim
)

// freeLapsedLegacy frees a claim the package wrote before it ran on the
// library, if it is "running" with its lease (leaseUntilMs) lapsed, as a
// release leaves a key, with one conditional write; a refused write's old
// item says whether it is done, still its holder's, or freed (by another
// delivery) or gone, to be claimed.
func (g *Guard) freeLapsedLegacy(ctx context.Context, eventID string) (int, error) {
	state, lease, token := expression.Name("state"), expression.Name("leaseUntilMs"), expression.Name("token")
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(state.Equal(expression.Value("running")), lease.LessThan(expression.Value(g.now().UnixMilli())),
			expression.AttributeNotExists(expression.Name("fingerprint")), expression.AttributeExists(token))).
		WithUpdate(expression.Set(expression.Name("releasedToken"), token).
			Remove(token).Remove(state).Remove(lease)).
		Build()
	if err != nil {
		return 0, err
	}
	_, err = g.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &g.Table,
		Key:                 map[string]types.AttributeValue{PartitionKey: &types.AttributeValueMemberS{Value: eventID}},
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	var refused *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return legacyFreed, nil
	case !errors.As(err, &refused):
		return 0, err
	}
	switch s, _ := refused.Item["state"].(*types.AttributeValueMemberS); {
	case s != nil && s.Value == "done":
		return legacyDone, nil
	case s != nil && s.Value == "running":
		if _, ok := refused.Item["fingerprint"]; !ok {
			return legacyRunning, nil
		}
	}
	// Freed by another delivery (and perhaps claimed since), or gone: the
	// library's claim says what it is now.
	return legacyFreed, nil
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
