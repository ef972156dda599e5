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
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/idempotency"
)

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

// names maps every #placeholder of the expressions below to its attribute
// (item's tags).
var names = map[string]string{
	"#fp": "fingerprint", "#token": "token", "#lease": "leaseExpiresAtMs", "#createdAt": "createdAt",
	"#claimedAt": "claimedAt", "#doneAt": "completedAt", "#released": "releasedAt", "#response": "response",
	"#attempts": "attempts", "#failures": "failures", "#lastError": "lastError", "#relToken": "releasedToken",
	"#claimKey": "claimKey", "#claimReq": "claimRequestId", "#claimFP": "claimFingerprint", "#ttl": TTLAttribute,
}

// The conditions of the three transitions.
const (
	// claimable: new, past its retention, or (same fingerprint, not
	// completed, and nobody's lease running). A different fingerprint never
	// passes, so the refusal's old item is always checked for it.
	condClaimable = "attribute_not_exists(#pk) OR #ttl <= :nowS OR (#fp = :fp" +
		" AND attribute_not_exists(#doneAt) AND (attribute_not_exists(#token) OR #lease <= :nowMs))"
	// condClaimableAfterRelease (idempotency.Claim.AnyAfterRelease) also takes
	// a key its holder released with any fingerprint (a release leaves its
	// token in #relToken; an item of unknown shape has none). Another
	// fingerprint still never passes on a completed, held or lapsed key.
	condClaimableAfterRelease = condClaimable + " OR (attribute_not_exists(#doneAt)" +
		" AND attribute_not_exists(#token) AND attribute_exists(#relToken))"
	// held: the token is the current holder's and nothing finished the key.
	condHeld = "#token = :token AND attribute_not_exists(#doneAt)"
)

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
	// DefaultPartitionKey.
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
	sets := []string{"#fp = :fp", "#token = :token", "#lease = :lease", "#claimedAt = :now",
		"#createdAt = if_not_exists(#createdAt, :now)", "#ttl = :ttl"}
	// A key past its retention starts over: nothing of its old answer stays.
	rems := []string{"#doneAt", "#response", "#relToken"}
	values := map[string]any{
		":fp": c.Fingerprint, ":token": c.Token, ":lease": now.Add(c.Lease).UnixMilli(),
		":now": FormatTime(now), ":ttl": now.Add(t.retention() + c.Lease).Unix(), ":one": 1,
		":nowMs": now.UnixMilli(), ":nowS": now.Unix(),
	}
	for _, a := range []struct{ ph, v string }{{"claimReq", c.Request.RequestID}, {"claimFP", c.Request.Fingerprint}, {"claimKey", c.Request.Key}} {
		if a.v == "" {
			rems = append(rems, "#"+a.ph)
			continue
		}
		sets = append(sets, "#"+a.ph+" = :"+a.ph)
		values[":"+a.ph] = a.v
	}
	expr := "SET " + strings.Join(sets, ", ") + " ADD #attempts :one REMOVE " + strings.Join(rems, ", ")
	cond := condClaimable
	if c.AnyAfterRelease {
		cond = condClaimableAfterRelease
	}
	// A key past its retention whose item DynamoDB TTL has not deleted yet
	// (that takes up to days) starts a fresh record: no SET can reset the
	// counters only when the item expired, so the first write leaves such
	// an item alone, and its refusal (which shows the old item) leads to a
	// second write that replaces the expired record, if it still is one.
	fresh := "SET " + strings.Join(append(sets[:len(sets):len(sets)], "#attempts = :one"), ", ") +
		" REMOVE " + strings.Join(append(rems, "#released", "#failures", "#lastError"), ", ")
	fresh = strings.Replace(fresh, "#createdAt = if_not_exists(#createdAt, :now)", "#createdAt = :now", 1)
	written, old, failed, err := t.write(ctx, name, expr, condLive+" AND ("+cond+")", values)
	for range 2 {
		if err != nil || !failed || old == nil || ttlOf(old) > now.Unix() {
			break
		}
		written, old, failed, err = t.write(ctx, name, fresh, condExpired, values)
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

// condLive and condExpired split a claim by the key's retention: a new or
// live key is claimed by the usual write; an item past its retention only
// by the write that replaces it with a fresh record.
const (
	condLive    = "(attribute_not_exists(#pk) OR #ttl > :nowS)"
	condExpired = "attribute_not_exists(#pk) OR #ttl <= :nowS"
)

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
	values := map[string]any{
		":now": FormatTime(now), ":response": string(response), ":ttl": now.Add(t.retention()).Unix(), ":token": token,
	}
	k, err := t.transition(ctx, name, "SET #doneAt = :now, #response = :response, #ttl = :ttl", values)
	if err != nil {
		return nil, t.classify(err, "complete", func(old *idempotency.Record) error { return idempotency.ClassifyComplete(old, token) })
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
	values := map[string]any{
		":now": FormatTime(now), ":token": token, ":ttl": now.Add(t.retention()).Unix(), ":one": 1,
	}
	expr := "SET #released = :now, #relToken = :token, #ttl = :ttl"
	rems := "#token, #lease, #claimKey, #claimReq, #claimFP"
	if errText != "" {
		expr += ", #lastError = :lastError"
		values[":lastError"] = errText
	} else {
		rems += ", #lastError"
	}
	k, err := t.transition(ctx, name, expr+" ADD #failures :one REMOVE "+rems, values)
	if err != nil {
		return nil, t.classify(err, "release", func(old *idempotency.Record) error { return idempotency.ClassifyRelease(old, token) })
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
	values := map[string]any{
		":token": token, ":lease": until.UnixMilli(), ":ttl": until.Unix(), ":lastError": errText,
	}
	k, err := t.transition(ctx, name, "SET #lease = :lease, #ttl = :ttl, #lastError = :lastError", values)
	if err != nil {
		return nil, t.classify(err, "hold", func(old *idempotency.Record) error { return idempotency.ClassifyComplete(old, token) })
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

// transition runs a holder's write (condition: still held by :token).
func (t *Table) transition(ctx context.Context, name, expr string, values map[string]any) (*idempotency.Record, error) {
	written, old, failed, err := t.write(ctx, name, expr, condHeld, values)
	switch {
	case err != nil:
		return nil, err
	case failed:
		return nil, refused{old}
	}
	return t.decode(written)
}

// classify turns a refused holder's write into the domain's answer and
// wraps a dependency error.
func (t *Table) classify(err error, op string, explain func(*idempotency.Record) error) error {
	var r refused
	if !errors.As(err, &r) {
		return fmt.Errorf("dynamostore: %s: %w", op, err)
	}
	var old *idempotency.Record
	if r.old != nil {
		if old, err = t.decode(r.old); err != nil {
			return err
		}
	}
	return explain(old)
}

// placeholder finds the #name and :value placeholders of an expression.
var placeholder = regexp.MustCompile(`[#:][A-Za-z0-9]+`)

// write runs one conditional UpdateItem whose refusal returns the item it
// saw (ReturnValuesOnConditionCheckFailure = ALL_OLD). When the condition
// fails, failed is true and old is that item (nil if there was none): the
// same request tells why, no read follows.
func (t *Table) write(ctx context.Context, name, expr, cond string, values map[string]any) (written, old map[string]types.AttributeValue, failed bool, err error) {
	used, vals := map[string]string{}, map[string]any{}
	for _, ph := range placeholder.FindAllString(expr+" "+cond, -1) {
		switch {
		case ph == "#pk":
			used[ph] = t.partitionKey()
		case ph[0] == '#':
			used[ph] = names[ph]
		default:
			vals[ph] = values[ph]
		}
	}
	av, err := attributevalue.MarshalMap(vals)
	if err != nil {
		return nil, nil, false, err
	}
	out, err := t.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &t.Name,
		Key:                                 t.key(name),
		UpdateExpression:                    &expr,
		ConditionExpression:                 &cond,
		ExpressionAttributeNames:            used,
		ExpressionAttributeValues:           av,
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
