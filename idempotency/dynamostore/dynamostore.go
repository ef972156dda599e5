// Package dynamostore keeps idempotency keys in a DynamoDB table: the one
// implementation of claim, complete and release that the /keys routes of the
// service, events/once and the idempotency library share. Each transition is
// ONE conditional UpdateItem that returns the old item when its condition
// fails (ReturnValuesOnConditionCheckFailure = ALL_OLD); the idempotency
// package's Classify functions then explain the refusal from that item. No
// read precedes a write.
//
// The table needs a string partition key (PartitionKey, default "id") and
// should have DynamoDB TTL on "ttl" (CreateTable, or the CDK helper in
// infra/idemtable). Any table with a string partition key can hold keys
// beside other items under a Prefix (the service's table uses "key#").
package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/idempotency"
)

// ErrPartitionKeyName refuses a write on a table whose partition key name
// holds "[" or "]": the SDK's expression builder, which writes every
// condition here, reads them as a list index, so the condition "the key
// exists" could not be stated. Any other name works, dots included.
var ErrPartitionKeyName = errors.New(`dynamostore: a partition key name with "[" or "]" cannot be named in a condition; use another name`)

// Defaults and attribute names a table must agree with.
const (
	DefaultPartitionKey = "id"
	// TTLAttribute holds the end of a key's retention (epoch seconds): the
	// table's DynamoDB TTL attribute.
	TTLAttribute = "ttl"
)

// item is a key item's attributes besides its partition key, as
// attributevalue maps them. Instants are RFC 3339 strings in UTC with
// milliseconds (FormatTime), the lease in epoch milliseconds, ttl in epoch
// seconds.
type item struct {
	Fingerprint    string    `dynamodbav:"fingerprint"`
	Token          string    `dynamodbav:"token"`
	LeaseMs        int64     `dynamodbav:"leaseExpiresAtMs"`
	CreatedAt      time.Time `dynamodbav:"createdAt"`
	ClaimedAt      time.Time `dynamodbav:"claimedAt"`
	CompletedAt    time.Time `dynamodbav:"completedAt"`
	ReleasedAt     time.Time `dynamodbav:"releasedAt"`
	Response       string    `dynamodbav:"response"`
	Attempts       int       `dynamodbav:"attempts"`
	Failures       int       `dynamodbav:"failures"`
	LastError      string    `dynamodbav:"lastError"`
	ReleasedToken  string    `dynamodbav:"releasedToken"`
	ClaimKey       string    `dynamodbav:"claimKey"`
	ClaimRequestID string    `dynamodbav:"claimRequestId"`
	ClaimFP        string    `dynamodbav:"claimFingerprint"` // the claim request body's (keyed) fingerprint, HTTP only
	TTL            int64     `dynamodbav:"ttl"`
}

// attr names the attributes the expressions below write and test (item's
// tags) for the SDK's expression builder.
var attr = struct {
	fp, token, lease, createdAt, claimedAt, doneAt, released, response, relToken expression.NameBuilder
	attempts, failures, lastError, ttl, claimKey, claimReq, claimFP              expression.NameBuilder
}{
	fp: expression.Name("fingerprint"), token: expression.Name("token"), lease: expression.Name("leaseExpiresAtMs"),
	createdAt: expression.Name("createdAt"), claimedAt: expression.Name("claimedAt"), doneAt: expression.Name("completedAt"),
	released: expression.Name("releasedAt"), response: expression.Name("response"), relToken: expression.Name("releasedToken"),
	attempts: expression.Name("attempts"), failures: expression.Name("failures"), lastError: expression.Name("lastError"),
	ttl: expression.Name(TTLAttribute), claimKey: expression.Name("claimKey"), claimReq: expression.Name("claimRequestId"),
	claimFP: expression.Name("claimFingerprint"),
}

// claimable: new, past its retention, or (same fingerprint, not
// completed, and nobody's lease running). A different fingerprint never
// passes, so the refusal's old item is always checked for it. With
// anyAfterRelease (idempotency.Claim.AnyAfterRelease) it also takes a key
// its holder released with any fingerprint (a release removes the token and
// leaves it in releasedToken; an item of unknown shape has neither). Another
// fingerprint still never passes on a completed, held or lapsed key.
func (t *Table) claimable(c idempotency.Claim) expression.ConditionBuilder {
	same := attr.fp.Equal(expression.Value(c.Fingerprint))
	if len(c.SameFingerprints) > 0 {
		others := make([]expression.OperandBuilder, len(c.SameFingerprints))
		for i, fp := range c.SameFingerprints {
			others[i] = expression.Value(fp)
		}
		same = attr.fp.In(expression.Value(c.Fingerprint), others...)
	}
	cond := expression.Or(expression.AttributeNotExists(t.pk()), attr.ttl.LessThanEqual(expression.Value(c.Now.Unix())),
		expression.And(same, expression.AttributeNotExists(attr.doneAt),
			expression.AttributeNotExists(attr.token).Or(attr.lease.LessThanEqual(expression.Value(c.Now.UnixMilli())))))
	if c.AnyAfterRelease {
		cond = cond.Or(expression.And(expression.AttributeNotExists(attr.doneAt), expression.AttributeNotExists(attr.token), expression.AttributeExists(attr.relToken)))
	}
	return cond
}

// held: the token is the current holder's, nothing finished the key, and
// its retention has not ended (an item TTL has yet to delete is gone).
func held(tok string, now time.Time) expression.ConditionBuilder {
	return attr.token.Equal(expression.Value(tok)).And(expression.AttributeNotExists(attr.doneAt),
		attr.ttl.GreaterThan(expression.Value(now.Unix())))
}

// API is the part of the DynamoDB client the table uses; *dynamodb.Client has it.
type API interface {
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Table holds idempotency keys in one DynamoDB table.
type Table struct {
	DB   API
	Name string
	// PartitionKey is the table's partition key attribute (type S); "" is
	// DefaultPartitionKey. A name holding "[" or "]" is refused
	// (ErrPartitionKeyName).
	PartitionKey string
	// Prefix starts every key item's partition key value, so keys can share
	// a table with other items.
	Prefix string
	// Retention is how long a key is kept after its last transition (its
	// TTL); zero is idempotency.DefaultRetention. Within it a completed key
	// replays; after it the key can be claimed anew.
	Retention time.Duration
}

// New returns a Table on name with the default partition key and retention.
func New(db API, name string) *Table { return &Table{DB: db, Name: name} }

// Claim takes the key for one holder with one conditional write: a new key,
// a released one, or one whose lease lapsed. Otherwise it returns
// idempotency.ClassifyClaim's answer: *idempotency.Replay for a completed
// key or the caller's own claim (answer lost, or a retried HTTP request),
// else *idempotency.Rejection (fingerprint_mismatch, in_progress). A claim
// whose fields are longer than the idempotency package allows
// (Claim.Validate) is refused without a request: the item must keep room
// for the response.
func (t *Table) Claim(ctx context.Context, name string, c idempotency.Claim) (*idempotency.Record, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("dynamostore: claim: %w", err)
	}
	c.Now = millis(c.Now)
	now := c.Now
	// The claim's fields; a field the claim does not carry is removed, and
	// a key past its retention starts over: nothing of its old answer stays.
	claim := func(created expression.OperandBuilder) expression.UpdateBuilder {
		u := expression.Set(attr.fp, expression.Value(c.Fingerprint)).
			Set(attr.token, expression.Value(c.Token)).
			Set(attr.lease, expression.Value(now.Add(c.Lease).UnixMilli())).
			Set(attr.claimedAt, expression.Value(FormatTime(now))).
			Set(attr.createdAt, created).
			Set(attr.ttl, expression.Value(epochCeil(now.Add(t.retention()+c.Lease)))).
			Remove(attr.doneAt).Remove(attr.response)
		for _, a := range []struct {
			name expression.NameBuilder
			v    string
		}{{attr.claimReq, c.Request.RequestID}, {attr.claimFP, c.Request.Fingerprint}, {attr.claimKey, c.Request.Key}} {
			if a.v == "" {
				u = u.Remove(a.name)
			} else {
				u = u.Set(a.name, expression.Value(a.v))
			}
		}
		return u
	}
	nowS := expression.Value(now.Unix())
	live := expression.AttributeNotExists(t.pk()).Or(attr.ttl.GreaterThan(nowS))
	usual := claim(expression.IfNotExists(attr.createdAt, expression.Value(FormatTime(now)))).Add(attr.attempts, expression.Value(1))
	claimable := live.And(t.claimable(c))
	written, old, failed, err := t.write(ctx, name, usual, claimable)
	// A key past its retention whose item DynamoDB TTL has not deleted yet
	// (that takes up to days) starts a fresh record: no SET can reset the
	// counters only when the item expired, so the first write leaves such
	// an item alone, and its refusal (which shows the old item) leads to a
	// second write that replaces the expired record, if it still is one.
	fresh := claim(expression.Value(FormatTime(now))).Set(attr.attempts, expression.Value(1)).
		Remove(attr.released).Remove(attr.failures).Remove(attr.lastError).Remove(attr.relToken)
	expired := expression.AttributeNotExists(t.pk()).Or(attr.ttl.LessThanEqual(nowS))
	replacing := false
	for range 2 {
		switch {
		case err != nil || !failed || old == nil:
		case ttlOf(old) <= now.Unix():
			written, old, failed, err = t.write(ctx, name, fresh, expired)
			replacing = true
			continue
		case replacing:
			// The replacing write met the key claimed anew by another
			// caller in between, who may be done with it already (released
			// it: claimable again). Its refusal is no answer to this claim:
			// ClassifyClaim explains only the usual write's, so that write
			// decides, once more (only in this race: a third write).
			written, old, failed, err = t.write(ctx, name, usual, claimable)
			replacing = false
			continue
		}
		break
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("dynamostore: claim: %w", err)
	case !failed:
		return t.decode(written)
	}
	k, err := t.decode(old)
	if err != nil {
		return nil, err
	}
	return nil, idempotency.ClassifyClaim(k, c)
}

// epochCeil is t in epoch seconds, rounded up: DynamoDB TTL counts whole
// seconds, and a key is kept at least until t (a retention under a second,
// a lease, a hold), never cut short by the second t falls in.
func epochCeil(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// ttlOf is an item's end of retention (epoch seconds; 0 when absent or
// malformed).
func ttlOf(m map[string]types.AttributeValue) int64 {
	var it item
	_ = attributevalue.UnmarshalMap(m, &it)
	return it.TTL
}

// Complete stores the response of the holder of token with one conditional
// write; the key then replays it until its retention ends. A retry of the
// same complete answers *idempotency.Replay; a token that no longer holds the
// key gets a *idempotency.Rejection (lease_lost, key_not_found).
func (t *Table) Complete(ctx context.Context, name, token string, response []byte, now time.Time) (*idempotency.Record, error) {
	now = millis(now)
	u := expression.Set(attr.doneAt, expression.Value(FormatTime(now))).
		Set(attr.response, expression.Value(string(response))).
		Set(attr.ttl, expression.Value(epochCeil(now.Add(t.retention()))))
	k, err := t.transition(ctx, name, token, u, now)
	if err != nil {
		return nil, t.classify(err, "complete", now, func(old *idempotency.Record) error { return idempotency.ClassifyComplete(old, token) })
	}
	return k, nil
}

// Release gives the key up after a failed attempt, with one conditional
// write: it is claimable again at once, and its failure count grows.
// errText is stored as the key's last error, fitted by idempotency.FitError
// (keep secrets out of it).
func (t *Table) Release(ctx context.Context, name, token, errText string, now time.Time) (*idempotency.Record, error) {
	now = millis(now)
	errText = idempotency.FitError(errText)
	u := expression.Set(attr.released, expression.Value(FormatTime(now))).
		Set(attr.relToken, expression.Value(token)).
		Set(attr.ttl, expression.Value(epochCeil(now.Add(t.retention())))).
		Add(attr.failures, expression.Value(1)).
		Remove(attr.lease).Remove(attr.claimKey).Remove(attr.claimReq).Remove(attr.claimFP)
	if errText != "" {
		u = u.Set(attr.lastError, expression.Value(errText))
	} else {
		u = u.Remove(attr.lastError)
	}
	k, err := t.transition(ctx, name, token, u.Remove(attr.token), now)
	if err != nil {
		return nil, t.classify(err, "release", now, func(old *idempotency.Record) error { return idempotency.ClassifyRelease(old, token) })
	}
	return k, nil
}

// Hold keeps the key held by token for the rest of its retention, with one
// conditional write: the holder ran its effect but cannot store the
// response, so no claim may run it again until the key is gone. errText is
// stored as the key's last error, fitted by idempotency.FitError. Refusals are
// Complete's.
func (t *Table) Hold(ctx context.Context, name, token, errText string, now time.Time) (*idempotency.Record, error) {
	now = millis(now)
	errText = idempotency.FitError(errText)
	until := now.Add(t.retention())
	u := expression.Set(attr.lease, expression.Value(until.UnixMilli())).
		Set(attr.ttl, expression.Value(epochCeil(until))).
		Set(attr.lastError, expression.Value(errText))
	k, err := t.transition(ctx, name, token, u, now)
	if err != nil {
		return nil, t.classify(err, "hold", now, func(old *idempotency.Record) error { return idempotency.ClassifyComplete(old, token) })
	}
	return k, nil
}

// Get reads a key with a strongly consistent read; a key past its retention
// reads as not found (*idempotency.Rejection key_not_found).
func (t *Table) Get(ctx context.Context, name string, now time.Time) (*idempotency.Record, error) {
	out, err := t.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &t.Name, Key: t.key(name), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("dynamostore: get: %w", err)
	}
	if out.Item == nil {
		return nil, &idempotency.Rejection{Code: idempotency.CodeNotFound}
	}
	k, err := t.decode(out.Item)
	if err != nil {
		return nil, err
	}
	if k.Gone(now) {
		return nil, &idempotency.Rejection{Code: idempotency.CodeNotFound}
	}
	return k, nil
}

// refused carries the old item of a holder's refused write to classify.
type refused struct {
	old map[string]types.AttributeValue
}

func (refused) Error() string { return "dynamostore: refused" }

// transition runs a holder's write (condition: still held by tok at now).
func (t *Table) transition(ctx context.Context, name, tok string, u expression.UpdateBuilder, now time.Time) (*idempotency.Record, error) {
	written, old, failed, err := t.write(ctx, name, u, held(tok, now))
	switch {
	case err != nil:
		return nil, err
	case failed:
		return nil, refused{old}
	}
	return t.decode(written)
}

// classify turns a refused holder's write into the domain's answer (a key
// past its retention at now is no key) and wraps a dependency error.
func (t *Table) classify(err error, op string, now time.Time, explain func(*idempotency.Record) error) error {
	var r refused
	if !errors.As(err, &r) {
		return fmt.Errorf("dynamostore: %s: %w", op, err)
	}
	var old *idempotency.Record
	if r.old != nil {
		if old, err = t.decode(r.old); err != nil {
			return err
		}
		if old.Gone(now) {
			old = nil
		}
	}
	return explain(old)
}

// write runs one conditional UpdateItem whose refusal returns the item it
// saw (ReturnValuesOnConditionCheckFailure = ALL_OLD). When the condition
// fails, failed is true and old is that item (nil if there was none): the
// same request tells why, no read follows.
func (t *Table) write(ctx context.Context, name string, u expression.UpdateBuilder, cond expression.ConditionBuilder) (written, old map[string]types.AttributeValue, failed bool, err error) {
	if strings.ContainsAny(t.partitionKey(), "[]") {
		return nil, nil, false, ErrPartitionKeyName
	}
	e, err := expression.NewBuilder().WithUpdate(u).WithCondition(cond).Build()
	if err != nil {
		return nil, nil, false, err
	}
	out, err := t.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &t.Name,
		Key:                                 t.key(name),
		UpdateExpression:                    e.Update(),
		ConditionExpression:                 e.Condition(),
		ExpressionAttributeNames:            e.Names(),
		ExpressionAttributeValues:           e.Values(),
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return nil, ccf.Item, true, nil
	case err != nil:
		return nil, nil, false, err
	}
	return out.Attributes, nil, false, nil
}

func (t *Table) key(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{t.partitionKey(): &types.AttributeValueMemberS{Value: t.Prefix + name}}
}

// pk is the partition key attribute, as the expression builder names it.
func (t *Table) pk() expression.NameBuilder { return expression.NameNoDotSplit(t.partitionKey()) }

func (t *Table) partitionKey() string {
	if t.PartitionKey == "" {
		return DefaultPartitionKey
	}
	return t.PartitionKey
}

func (t *Table) retention() time.Duration {
	if t.Retention > 0 {
		return t.Retention
	}
	return idempotency.DefaultRetention
}

// decode reads a key item; nil for nil. A malformed item (an attribute of
// another type, a partition key outside Prefix) is an error, never a
// half-filled record.
func (t *Table) decode(m map[string]types.AttributeValue) (*idempotency.Record, error) {
	if m == nil {
		return nil, nil
	}
	var it item
	if err := attributevalue.UnmarshalMap(m, &it); err != nil {
		return nil, fmt.Errorf("dynamostore: malformed key item: %w", err)
	}
	pk, ok := m[t.partitionKey()].(*types.AttributeValueMemberS)
	if !ok || !strings.HasPrefix(pk.Value, t.Prefix) {
		return nil, fmt.Errorf("dynamostore: malformed key item: attribute %q", t.partitionKey())
	}
	k := &idempotency.Record{
		Name:           strings.TrimPrefix(pk.Value, t.Prefix),
		Fingerprint:    it.Fingerprint,
		Token:          it.Token,
		LeaseExpiresAt: time.UnixMilli(it.LeaseMs).UTC(),
		CreatedAt:      it.CreatedAt.UTC(),
		ClaimedAt:      it.ClaimedAt.UTC(),
		CompletedAt:    it.CompletedAt.UTC(),
		ReleasedAt:     it.ReleasedAt.UTC(),
		Attempts:       it.Attempts,
		Failures:       it.Failures,
		LastError:      it.LastError,
		ReleasedToken:  it.ReleasedToken,
		Claim:          idempotency.Request{Key: it.ClaimKey, Fingerprint: it.ClaimFP, RequestID: it.ClaimRequestID},
		ExpiresAt:      time.Unix(it.TTL, 0).UTC(),
	}
	if it.Response != "" {
		k.Response = []byte(it.Response)
	}
	if k.Token == "" {
		k.LeaseExpiresAt = time.Time{}
	}
	return k, nil
}

// timeLayout is how instants are stored: RFC 3339, UTC, milliseconds (the
// service's items use the same).
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// millis is t in UTC at millisecond precision, as items store instants.
func millis(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// FormatTime renders t the way key items store it.
func FormatTime(t time.Time) string { return t.UTC().Format(timeLayout) }
