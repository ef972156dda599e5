// Package store keeps actions in DynamoDB. Every state change is ONE
// conditional UpdateItem: the item is the lock, and when the condition fails
// the same call returns the old item (ReturnValuesOnConditionCheckFailure =
// ALL_OLD), from which the domain classifies the outcome. No read precedes a
// write anywhere.
package store

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/idemkey"
)

// DefaultRetention is how long a finished action is kept (DynamoDB TTL) so
// late callers still get 409/410 rather than 404.
const DefaultRetention = 30 * 24 * time.Hour

// ErrUnavailable wraps DynamoDB throttling, 5xx and network faults: the
// outcome is unknown and the caller may retry.
var ErrUnavailable = errors.New("store: dynamodb unavailable")

// DefaultExpiryShards is how many partitions the expiry index spreads open
// actions over (by a hash of the id). Every create and every finish writes
// the index, and one index partition takes about 1,000 writes/s, so 16
// shards absorb ~16,000/s (far above the API's default stage throttle) even
// when a whole burst expires in the same minute; the sweeper's idle cost is
// 16 small Queries a minute. Raise it, never lower it, on a live table
// (actions in dropped shards would only expire by TTL).
const DefaultExpiryShards = 16

// Options tune a Store; zero values mean the defaults.
type Options struct {
	Retention    time.Duration // DefaultRetention
	ExpiryShards int           // DefaultExpiryShards
	KeyRetention time.Duration // idemkey.DefaultRetention
}

// Store reads and writes action items in one table.
type Store struct {
	db           *dynamodb.Client
	table        string
	retention    time.Duration
	shards       int
	keyRetention time.Duration
}

// New returns a Store on table.
func New(db *dynamodb.Client, table string, o Options) *Store {
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.ExpiryShards <= 0 {
		o.ExpiryShards = DefaultExpiryShards
	}
	if o.KeyRetention <= 0 {
		o.KeyRetention = idemkey.DefaultRetention
	}
	return &Store{db: db, table: table, retention: o.Retention, shards: o.ExpiryShards, keyRetention: o.KeyRetention}
}

// ExpiryShards is the number of partitions of the expiry index.
func (st *Store) ExpiryShards() int { return st.shards }

// Table is the table's name.
func (st *Store) Table() string { return st.table }

// Retention is how long finished actions stay readable.
func (st *Store) Retention() time.Duration { return st.retention }

// The conditions. {x} is the #placeholder of attribute x.
const (
	// open: the action exists and no operation finished it.
	condOpen = "attribute_exists({actionId}) AND attribute_not_exists({consumedAt})" +
		" AND attribute_not_exists({canceledAt}) AND attribute_not_exists({expiredAt})" +
		" AND {expiresAtMs} > :nowMs"
	// consumable: open, active, and (for a PIN-protected action) not locked.
	condConsumable = condOpen + " AND {activeAtMs} <= :nowMs"
	condNoPIN      = " AND attribute_not_exists({pinHash})"
	condPIN        = " AND (attribute_not_exists({pinHash}) OR ({pinHash} IN (%s) AND {pinFailures} < {maxPinAttempts}))"
	condWrongPIN   = " AND attribute_exists({pinHash}) AND {pinFailures} < {maxPinAttempts}"
)

// Create writes a new action; the item must not exist. On a failed condition
// it returns the domain's classification: *action.Replay for a retry of the
// same call, a *action.Rejection otherwise.
func (st *Store) Create(ctx context.Context, a *action.Action) (*action.Action, error) {
	u := newUpdate()
	u.set(attrUserID, s(a.UserID))
	u.setIf(attrKind, a.Kind)
	u.set(attrActiveAtMs, n(a.ActiveAt.UnixMilli()))
	u.set(attrExpiresAtMs, n(a.ExpiresAt.UnixMilli()))
	u.set(attrCreatedAt, ts(a.CreatedAt))
	u.set(attrTTL, n(a.ExpiresAt.Add(st.retention).Unix()))
	u.set(attrExpShard, s(expiryShard(a.ID, st.shards)))
	if len(a.Metadata) > 0 {
		m := make(map[string]types.AttributeValue, len(a.Metadata))
		for k, v := range a.Metadata {
			m[k] = s(v)
		}
		u.set(attrMetadata, &types.AttributeValueMemberM{Value: m})
	}
	if a.PINProtected() {
		u.set(attrPINHash, b(a.PINHash))
		u.set(attrPINFailures, n(0))
		u.set(attrMaxPINAttempts, n(int64(a.MaxPINAttempts)))
	}
	if len(a.Payload) > 0 {
		u.set(attrPayload, b(a.Payload))
	}
	setWrite(u, attrCreateKey, attrCreateFP, attrCreateReq, a.Create)
	cond := u.cond("attribute_not_exists({actionId})")

	_, old, err := st.update(ctx, a.ID, u, cond, types.ReturnValueNone)
	if err != nil {
		return nil, err
	}
	if old != nil {
		return nil, action.ClassifyCreate(old, action.Attempt{Key: a.Create.Key, Fingerprint: a.Create.Fingerprint, RequestID: a.Create.RequestID})
	}
	return a, nil
}

// Get reads an action with a strongly consistent read.
func (st *Store) Get(ctx context.Context, id string) (*action.Action, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &st.table,
		Key:            key(id),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, classifyErr(err)
	}
	if out.Item == nil {
		return nil, action.Reject(action.CodeNotFound, nil)
	}
	return Decode(out.Item)
}

// Consume is a request to consume an action.
type Consume struct {
	Reason string
	// PINHashes are the HMACs of the presented PIN under every known secret
	// (none when no PIN was presented); the condition compares them with the
	// stored hash inside the write.
	PINHashes [][]byte
	Write     action.Write
	Now       time.Time
}

// Consume moves the action to consumed with one conditional write and returns
// it as written. A wrong or missing PIN on a protected action costs a second
// write that counts the failure atomically; its result is a Rejection with
// code invalid_pin (or whatever the count write found instead).
func (st *Store) Consume(ctx context.Context, id string, c Consume) (*action.Action, error) {
	now := action.Millis(c.Now)
	u := newUpdate()
	u.set(attrConsumedAt, ts(now))
	u.setIf(attrConsumedReason, c.Reason)
	u.set(attrTTL, n(now.Add(st.retention).Unix()))
	u.remove(attrExpShard) // finished: out of the expiry index, in the same write
	setWrite(u, attrConsumeKey, attrConsumeFP, attrConsumeReq, c.Write)
	u.value("nowMs", n(now.UnixMilli()))
	cond := condConsumable + condNoPIN
	if len(c.PINHashes) > 0 {
		placeholders := make([]string, len(c.PINHashes))
		for i, h := range c.PINHashes {
			placeholders[i] = u.value(fmt.Sprintf("pin%d", i), b(h))
		}
		cond = condConsumable + fmt.Sprintf(condPIN, strings.Join(placeholders, ", "))
	}

	written, old, err := st.update(ctx, id, u, u.cond(cond), types.ReturnValueAllNew)
	if err != nil {
		return nil, err
	}
	if old == nil {
		return written, nil
	}
	at := action.Attempt{Now: now, Key: c.Write.Key, Fingerprint: c.Write.Fingerprint, RequestID: c.Write.RequestID,
		PINMatches: pinMatches(old.PINHash, c.PINHashes)}
	why := action.ClassifyConsume(old, at)
	var r *action.Rejection
	if errors.As(why, &r) && r.Code == action.CodeInvalidPIN {
		return nil, st.countWrongPIN(ctx, id, at)
	}
	return nil, why
}

// countWrongPIN records one wrong PIN with ADD, so concurrent wrong attempts
// neither lose a count nor count past the limit (the condition stops at it).
// The time of each failure is appended; the max-th one is when it locked.
func (st *Store) countWrongPIN(ctx context.Context, id string, at action.Attempt) error {
	u := newUpdate()
	u.adds = append(u.adds, u.name(attrPINFailures)+" "+u.value("one", n(1)))
	u.sets = append(u.sets, u.name(attrPINFailedAt)+" = list_append(if_not_exists("+u.name(attrPINFailedAt)+", "+
		u.value("empty", &types.AttributeValueMemberL{Value: []types.AttributeValue{}})+"), "+
		u.value("failedAt", &types.AttributeValueMemberL{Value: []types.AttributeValue{ts(at.Now)}})+")")
	u.value("nowMs", n(at.Now.UnixMilli()))
	written, old, err := st.update(ctx, id, u, u.cond(condConsumable+condWrongPIN), types.ReturnValueAllNew)
	if err != nil {
		return err
	}
	if old != nil {
		return action.ClassifyConsume(old, at)
	}
	return action.Reject(action.CodeInvalidPIN, written)
}

// Cancel is a request to cancel an action.
type Cancel struct {
	Reason string
	Write  action.Write
	Now    time.Time
}

// Cancel marks an open action canceled with one conditional write. Canceling
// a canceled action answers with the first cancellation (*action.Replay).
func (st *Store) Cancel(ctx context.Context, id string, c Cancel) (*action.Action, error) {
	now := action.Millis(c.Now)
	u := newUpdate()
	u.set(attrCanceledAt, ts(now))
	u.setIf(attrCancelReason, c.Reason)
	u.set(attrTTL, n(now.Add(st.retention).Unix()))
	u.remove(attrExpShard)
	setWrite(u, attrCancelKey, attrCancelFP, attrCancelReq, c.Write)
	u.value("nowMs", n(now.UnixMilli()))

	written, old, err := st.update(ctx, id, u, u.cond(condOpen), types.ReturnValueAllNew)
	if err != nil {
		return nil, err
	}
	if old != nil {
		return nil, action.ClassifyCancel(old, action.Attempt{Now: now, Key: c.Write.Key, Fingerprint: c.Write.Fingerprint, RequestID: c.Write.RequestID})
	}
	return written, nil
}

// update runs one conditional UpdateItem on an action. It returns the item
// as written (when rv asks for it), or the old item when the condition failed
// (old is then non-nil, or nil with a not-found Rejection), or a dependency error.
func (st *Store) update(ctx context.Context, id string, u *update, cond string, rv types.ReturnValue) (written, old *action.Action, err error) {
	w, o, failed, err := st.write(ctx, id, u, cond, rv)
	switch {
	case err != nil:
		return nil, nil, err
	case failed && o == nil:
		return nil, nil, action.Reject(action.CodeNotFound, nil)
	case failed:
		old, err := Decode(o)
		return nil, old, err
	case rv == types.ReturnValueNone:
		return nil, nil, nil
	}
	written, err = Decode(w)
	return written, nil, err
}

// write runs one conditional UpdateItem on the item with partition key pk.
// When the condition fails, failed is true and old is the item the write saw
// (nil if there was none): the same request tells why, no read follows.
func (st *Store) write(ctx context.Context, pk string, u *update, cond string, rv types.ReturnValue) (written, old map[string]types.AttributeValue, failed bool, err error) {
	out, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &st.table,
		Key:                                 key(pk),
		UpdateExpression:                    aws.String(u.expression()),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            u.names,
		ExpressionAttributeValues:           u.values,
		ReturnValues:                        rv,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return nil, ccf.Item, true, nil
	case err != nil:
		return nil, nil, false, classifyErr(err)
	}
	return out.Attributes, nil, false, nil
}

func pinMatches(stored []byte, presented [][]byte) bool {
	match := false
	for _, h := range presented {
		match = hmac.Equal(stored, h) || match // constant time: no early exit
	}
	return match
}

// setWrite records which request performed an operation.
func setWrite(u *update, keyAttr, fpAttr, reqAttr string, w action.Write) {
	u.setIf(keyAttr, w.Key)
	u.setIf(fpAttr, w.Fingerprint)
	u.setIf(reqAttr, w.RequestID)
}

func key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrID: s(id)}
}

// classifyErr maps an SDK error: throttling, server faults and transport
// errors are ErrUnavailable (retryable); anything else is a bug on our side.
func classifyErr(err error) error {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorFault() != smithy.FaultServer && !throttling(apiErr.ErrorCode()) {
		return fmt.Errorf("store: dynamodb rejected the request: %w", err)
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

func throttling(code string) bool {
	switch code {
	case "ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded",
		"LimitExceededException", "TransactionConflictException":
		return true
	}
	return false
}
