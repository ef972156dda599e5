// Package bench measures ExactOnce (make bench) against the two designs the
// seeds describe, implemented here faithfully on the same DynamoDB:
//
//   - WriteThenRead (seed 000): one conditional UpdateItem; when the
//     condition fails, a GetItem to learn why (its mapConditionalFailure).
//   - ClaimRecord (seed 001, the Powertools idempotency utility): an
//     idempotency record per request key in its own table, claimed with a
//     conditional PutItem (IN_PROGRESS), then the operation, then an
//     UpdateItem to COMPLETED with the stored response; a duplicate's
//     PutItem fails and a GetItem returns the stored response.
//
// Both classify an outcome with the same domain rules as ExactOnce, so only
// the request pattern differs.
package bench

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
)

// Outcome names a consume's result as the HTTP API would: "consumed" or an
// error code.
type Outcome string

// WriteThenRead consumes with one conditional write and, on failure, reads
// the item to classify the failure.
type WriteThenRead struct {
	DB    *dynamodb.Client
	Table string
}

// Consume consumes id at now.
func (w *WriteThenRead) Consume(ctx context.Context, id, reason string, now time.Time) (Outcome, error) {
	nowMs := &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)}
	_, err := w.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        &w.Table,
		Key:              map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}},
		UpdateExpression: aws.String("SET consumedAt = :now, consumedReason = :reason"),
		ConditionExpression: aws.String("attribute_exists(actionId) AND attribute_not_exists(consumedAt)" +
			" AND attribute_not_exists(canceledAt) AND activeAtMs <= :nowMs AND expiresAtMs > :nowMs"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now":    &types.AttributeValueMemberS{Value: store.FormatTime(now)},
			":reason": &types.AttributeValueMemberS{Value: reason},
			":nowMs":  nowMs,
		},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return "consumed", nil
	case !errors.As(err, &ccf):
		return "", err
	}
	return w.mapConditionalFailure(ctx, id, now)
}

// mapConditionalFailure is seed 000's second request: read the item (by
// then possibly changed again) and say which condition failed.
func (w *WriteThenRead) mapConditionalFailure(ctx context.Context, id string, now time.Time) (Outcome, error) {
	out, err := w.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &w.Table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}},
	})
	if err != nil {
		return "", err
	}
	var old *action.Action
	if out.Item != nil {
		if old, err = store.Decode(out.Item); err != nil {
			return "", err
		}
	}
	var rej *action.Rejection
	if err := action.ClassifyConsume(old, action.Attempt{Now: now}); errors.As(err, &rej) {
		return Outcome(rej.Code), nil
	}
	return "", errors.New("bench: unclassified failure")
}

// ClaimRecord wraps WriteThenRead's consume in an idempotency record.
type ClaimRecord struct {
	DB        *dynamodb.Client
	IdemTable string // partition key "id"
	Op        *WriteThenRead
}

// Consume consumes id as the logical call key, answering a duplicate of
// the call from its stored record.
func (c *ClaimRecord) Consume(ctx context.Context, key, id, reason string, now time.Time) (Outcome, error) {
	recKey := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}}
	_, err := c.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &c.IdemTable,
		Item: map[string]types.AttributeValue{
			"id":     &types.AttributeValueMemberS{Value: key},
			"status": &types.AttributeValueMemberS{Value: "IN_PROGRESS"},
			"expiry": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(time.Hour).Unix(), 10)},
		},
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) { // a duplicate: read what the first call stored
		out, err := c.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &c.IdemTable, Key: recKey, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return "", err
		}
		if s, ok := out.Item["response"].(*types.AttributeValueMemberS); ok {
			return Outcome(s.Value), nil
		}
		return "in_progress", nil
	}
	if err != nil {
		return "", err
	}
	outcome, err := c.Op.Consume(ctx, id, reason, now)
	if err != nil {
		return "", err
	}
	_, err = c.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &c.IdemTable, Key: recKey,
		UpdateExpression:         aws.String("SET #s = :done, #r = :r"),
		ExpressionAttributeNames: map[string]string{"#s": "status", "#r": "response"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":done": &types.AttributeValueMemberS{Value: "COMPLETED"},
			":r":    &types.AttributeValueMemberS{Value: string(outcome)},
		},
	})
	return outcome, err
}

// CreateIdemTable makes ClaimRecord's table.
func CreateIdemTable(ctx context.Context, db *dynamodb.Client, name string) error {
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &name,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if errors.As(err, &inUse) {
		return nil
	}
	return err
}

// PreviousRelease is ExactOnce's consume before the expiry index kept
// finished actions: the same single conditional UpdateItem (ALL_OLD on
// failure), which also REMOVEd expShard, so DynamoDB wrote the index too.
type PreviousRelease struct {
	DB    *dynamodb.Client
	Table string
}

// Consume consumes id at now.
func (p *PreviousRelease) Consume(ctx context.Context, id, reason string, now time.Time) (Outcome, error) {
	_, err := p.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        &p.Table,
		Key:              map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}},
		UpdateExpression: aws.String("SET consumedAt = :now, consumedReason = :reason REMOVE expShard"),
		ConditionExpression: aws.String("attribute_exists(actionId) AND attribute_not_exists(consumedAt)" +
			" AND attribute_not_exists(canceledAt) AND attribute_not_exists(expiredAt) AND activeAtMs <= :nowMs AND expiresAtMs > :nowMs"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now":    &types.AttributeValueMemberS{Value: store.FormatTime(now)},
			":reason": &types.AttributeValueMemberS{Value: reason},
			":nowMs":  &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)},
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return "consumed", nil
	case !errors.As(err, &ccf):
		return "", err
	}
	var old *action.Action
	if ccf.Item != nil {
		if old, err = store.Decode(ccf.Item); err != nil {
			return "", err
		}
	}
	var rej *action.Rejection
	if err := action.ClassifyConsume(old, action.Attempt{Now: now}); errors.As(err, &rej) {
		return Outcome(rej.Code), nil
	}
	return "", errors.New("bench: unclassified failure")
}

// Step is (a)'s consume (WriteThenRead) moved toward ExactOnce's one
// difference at a time, on the same DynamoDB, so that the throughput
// between the two designs can be taken apart (the report's breakdown). With
// every field set it sends the request ExactOnce's store sends for a
// consume without PIN, key set or Idempotency-Key, built by hand.
type Step struct {
	DB    *dynamodb.Client
	Table string
	// OneRequest: a failed condition returns the item it saw (ALL_OLD),
	// classified from it, instead of a consistent read after it.
	OneRequest bool
	// Guards: ExactOnce's whole condition: also not expired by the sweeper,
	// no PIN, not a multi-use action, under no key set.
	Guards bool
	// Record: the write also stores which call consumed (its key,
	// fingerprint and request id) and moves the TTL to retention after now.
	Record bool
	// Answer: ReturnValues=ALL_NEW, decoded: the action as written, which
	// the API answers with (it opens the payload from it).
	Answer bool
}

// Consume consumes id as the call key at now.
func (s *Step) Consume(ctx context.Context, key, id, reason string, now time.Time) (Outcome, error) {
	in := &dynamodb.UpdateItemInput{
		TableName:        &s.Table,
		Key:              map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}},
		UpdateExpression: aws.String("SET consumedAt = :now, consumedReason = :reason"),
		ConditionExpression: aws.String("attribute_exists(actionId) AND attribute_not_exists(consumedAt)" +
			" AND attribute_not_exists(canceledAt) AND activeAtMs <= :nowMs AND expiresAtMs > :nowMs"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now":    &types.AttributeValueMemberS{Value: store.FormatTime(now)},
			":reason": &types.AttributeValueMemberS{Value: reason},
			":nowMs":  &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)},
		},
	}
	if s.OneRequest {
		in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
	if s.Guards {
		*in.ConditionExpression += " AND attribute_not_exists(expiredAt) AND attribute_not_exists(pinHash)" +
			" AND attribute_not_exists(maxUses) AND attribute_not_exists(keyId)"
	}
	if s.Record {
		*in.UpdateExpression += ", consumeKey = :key, consumeFingerprint = :fp, consumeRequestId = :req, #ttl = :ttl"
		in.ExpressionAttributeNames = map[string]string{"#ttl": "ttl"}
		in.ExpressionAttributeValues[":key"] = &types.AttributeValueMemberS{Value: key}
		in.ExpressionAttributeValues[":fp"] = &types.AttributeValueMemberS{Value: "fp"}
		in.ExpressionAttributeValues[":req"] = &types.AttributeValueMemberS{Value: key}
		in.ExpressionAttributeValues[":ttl"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(store.DefaultRetention).Unix(), 10)}
	}
	if s.Answer {
		in.ReturnValues = types.ReturnValueAllNew
	}
	out, err := s.DB.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		if s.Answer {
			if _, err := store.Decode(out.Attributes); err != nil {
				return "", err
			}
		}
		return "consumed", nil
	case !errors.As(err, &ccf):
		return "", err
	case !s.OneRequest:
		return (&WriteThenRead{DB: s.DB, Table: s.Table}).mapConditionalFailure(ctx, id, now)
	}
	var old *action.Action
	if ccf.Item != nil {
		if old, err = store.Decode(ccf.Item); err != nil {
			return "", err
		}
	}
	var rej *action.Rejection
	if err := action.ClassifyConsume(old, action.Attempt{Now: now}); errors.As(err, &rej) {
		return Outcome(rej.Code), nil
	}
	return "", errors.New("bench: unclassified failure")
}
