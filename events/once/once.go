// Package once is the idempotent-consumer helper for ExactOnce subscribers:
// it runs a handler at most once per event id, however often EventBridge
// delivers the event.
//
// Each event id is claimed in a DynamoDB table (partition key "eventId" of
// type S, TTL on "ttl") by one conditional PutItem. The claim holds a lease:
//   - the handler succeeds: the claim becomes "done" (one conditional
//     UpdateItem) and every later delivery is acknowledged without running it;
//   - the handler fails (error or panic): the claim is deleted (one
//     conditional DeleteItem) so the redelivery runs it again;
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
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
	ErrInProgress = errors.New("once: event is being handled by another delivery")
	// ErrLeaseLost: the handler ran longer than its lease and another
	// delivery took the claim over, so the handler may have run twice. Raise
	// the lease above the handler's longest run.
	ErrLeaseLost = errors.New("once: the handler outlived its lease; another delivery took the claim")
)

// API is the part of the DynamoDB client the guard uses; *dynamodb.Client has it.
type API interface {
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

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

// Claim attributes.
const (
	attrID    = "eventId"
	attrState = "state"
	attrToken = "token"
	attrLease = "leaseUntilMs"
	attrDone  = "doneAt"
	attrTTL   = "ttl"

	stateRunning = "running"
	stateDone    = "done"
)

// Do runs fn unless the event id was already handled. ran reports whether fn
// ran in this call. err is nil when fn succeeded or had succeeded before;
// fn's own error when it failed (the claim is released); ErrInProgress,
// ErrLeaseLost, or a DynamoDB error otherwise.
func (g *Guard) Do(ctx context.Context, eventID string, fn func(context.Context) error) (ran bool, err error) {
	if eventID == "" {
		return false, errors.New("once: empty event id")
	}
	now := g.now()
	token := rand.Text() // identifies this claim: only its holder finishes or releases it
	done, err := g.claim(ctx, eventID, token, now)
	if err != nil || done {
		return false, err
	}

	defer func() {
		// A panicking handler releases its claim like a failing one, then
		// panics on: the runtime reports it and the event is redelivered.
		if r := recover(); r != nil {
			g.release(context.WithoutCancel(ctx), eventID, token)
			panic(r)
		}
	}()
	if err := fn(ctx); err != nil {
		// Release even if ctx is done: the claim must not wait out its lease.
		if rerr := g.release(context.WithoutCancel(ctx), eventID, token); rerr != nil {
			return true, errors.Join(err, rerr)
		}
		return true, err
	}
	return true, g.finish(context.WithoutCancel(ctx), eventID, token)
}

// claim takes the event id, or reports it done, in one conditional PutItem.
func (g *Guard) claim(ctx context.Context, eventID, token string, now time.Time) (done bool, err error) {
	leaseUntil := now.Add(g.lease(ctx, now))
	_, err = g.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &g.Table,
		Item: map[string]types.AttributeValue{
			attrID:    &types.AttributeValueMemberS{Value: eventID},
			attrState: &types.AttributeValueMemberS{Value: stateRunning},
			attrToken: &types.AttributeValueMemberS{Value: token},
			attrLease: number(leaseUntil.UnixMilli()),
			// An abandoned claim is cleaned up after retention too.
			attrTTL: number(now.Add(g.retention()).Unix()),
		},
		// Free, or a running claim whose lease has lapsed (its holder died).
		ConditionExpression: aws.String("attribute_not_exists(#id) OR (#state = :running AND #lease < :now)"),
		ExpressionAttributeNames: map[string]string{
			"#id": attrID, "#state": attrState, "#lease": attrLease,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":running": &types.AttributeValueMemberS{Value: stateRunning},
			":now":     number(now.UnixMilli()),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		if s, ok := failed.Item[attrState].(*types.AttributeValueMemberS); ok && s.Value == stateDone {
			return true, nil
		}
		return false, ErrInProgress
	}
	if err != nil {
		return false, fmt.Errorf("once: claim %s: %w", eventID, err)
	}
	return false, nil
}

// finish marks the claim done, if it is still ours.
func (g *Guard) finish(ctx context.Context, eventID, token string) error {
	now := g.now()
	_, err := g.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           &g.Table,
		Key:                 key(eventID),
		UpdateExpression:    aws.String("SET #state = :done, #doneAt = :now, #ttl = :ttl REMOVE #lease"),
		ConditionExpression: aws.String("#token = :token"),
		ExpressionAttributeNames: map[string]string{
			"#state": attrState, "#doneAt": attrDone, "#ttl": attrTTL, "#lease": attrLease, "#token": attrToken,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":done":  &types.AttributeValueMemberS{Value: stateDone},
			":now":   number(now.UnixMilli()),
			":ttl":   number(now.Add(g.retention()).Unix()),
			":token": &types.AttributeValueMemberS{Value: token},
		},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return ErrLeaseLost
	}
	if err != nil {
		return fmt.Errorf("once: mark %s done: %w", eventID, err)
	}
	return nil
}

// release deletes the claim, if it is still ours, so a redelivery runs fn.
func (g *Guard) release(ctx context.Context, eventID, token string) error {
	_, err := g.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 &g.Table,
		Key:                       key(eventID),
		ConditionExpression:       aws.String("#token = :token"),
		ExpressionAttributeNames:  map[string]string{"#token": attrToken},
		ExpressionAttributeValues: map[string]types.AttributeValue{":token": &types.AttributeValueMemberS{Value: token}},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return nil // another delivery took it over: nothing of ours to release
	}
	if err != nil {
		return fmt.Errorf("once: release %s (it frees itself when its lease lapses): %w", eventID, err)
	}
	return nil
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

func key(eventID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrID: &types.AttributeValueMemberS{Value: eventID}}
}

func number(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// CreateTable makes a claims table (key eventId, on-demand, TTL on ttl) for
// local runs and tests; the CDK app makes the deployed one. An existing
// table is left as it is.
func CreateTable(ctx context.Context, db *dynamodb.Client, name string) error {
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &name,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrID), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrID), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if errors.As(err, &inUse) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("once: create table %s: %w", name, err)
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &name}, time.Minute); err != nil {
		return fmt.Errorf("once: wait for table %s: %w", name, err)
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &name,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrTTL), Enabled: aws.Bool(true)},
	})
	if err != nil {
		return fmt.Errorf("once: enable ttl on %s: %w", name, err)
	}
	return nil
}
