package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/exactonce/exactonce/internal/dynamoitem"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/tenant"
)

// UserIndex is the sparse, keys-only global secondary index of actions by
// user: partition key userKey (tenant and userId), sort key createdAtMs.
// Only the create writes those attributes, so consume, cancel and expiry
// never write to it.
const UserIndex = "byUser"

// Attributes of the user index, set by the create only.
const (
	attrUserKey     = "userKey"
	attrCreatedAtMs = "createdAtMs"
)

var userIndex = types.GlobalSecondaryIndex{
	IndexName: aws.String(UserIndex),
	KeySchema: []types.KeySchemaElement{
		{AttributeName: aws.String(attrUserKey), KeyType: types.KeyTypeHash},
		{AttributeName: aws.String(attrCreatedAtMs), KeyType: types.KeyTypeRange},
	},
	Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
}

// userKey names a user within a tenant. Tenant names hold no '#', so the
// first '#' after "u#" ends the tenant whatever the userId holds.
func userKey(tenantName, userID string) string { return "u#" + tenantName + "#" + userID }

// MaxListLimit bounds a page of a user's actions.
const MaxListLimit = 100

// maxListRounds bounds the index pages one list call reads while filters
// leave its page short; the cursor then continues where it stopped.
const maxListRounds = 10

// List is a request for one page of a user's actions, newest first.
type List struct {
	Tenant, UserID string
	Kind           string       // "" for any
	State          action.State // "" for any; else the state at Now
	Limit          int          // 1..MaxListLimit
	Cursor         string       // "" for the first page
	Now            time.Time
}

// Page is one page of a user's actions, and the cursor of the next ("" at the end).
type Page struct {
	Actions []*action.Action
	Cursor  string
}

// ErrBadCursor is a cursor this store did not hand out.
var ErrBadCursor = &action.InvalidError{Field: "cursor", Message: "is not a cursor this API returned"}

// position is a place in a user's index partition.
type position struct {
	CreatedAtMs int64  `json:"c"`
	Key         string `json:"k"` // the item's partition key
}

func (p position) cursor() string {
	b, _ := json.Marshal(p)
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseCursor reads a cursor a page of tenantName's user handed out: the
// base64url of exactly {"c": integer, "k": the partition key of one of the
// tenant's actions}. Anything else is ErrBadCursor before any request, so
// no start key DynamoDB would refuse (a key over 2 KB, of another type,
// missing or added attributes) is ever sent.
func parseCursor(c, tenantName string) (*position, error) {
	if c == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, ErrBadCursor
	}
	var raw struct {
		C *int64  `json:"c"`
		K *string `json:"k"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if dec.Decode(&raw) != nil || raw.C == nil || raw.K == nil {
		return nil, ErrBadCursor
	}
	if _, err := dec.Token(); err != io.EOF { // nothing after the object
		return nil, ErrBadCursor
	}
	if t, id := tenant.SplitItemKey(*raw.K); t != tenantName || tenant.ItemKey(t, id) != *raw.K || action.ValidateID("cursor", id) != nil {
		return nil, ErrBadCursor
	}
	return &position{CreatedAtMs: *raw.C, Key: *raw.K}, nil
}

// ListUser returns one page of a user's actions, newest first, as they are
// now (each read from the table, not the index). It costs one Query per
// index page and one BatchGetItem per 100 actions read.
func (st *Store) ListUser(ctx context.Context, l List) (*Page, error) {
	start, err := parseCursor(l.Cursor, l.Tenant)
	if err != nil {
		return nil, err
	}
	page := &Page{}
	for range maxListRounds {
		refs, next, err := st.userRefs(ctx, l.Tenant, l.UserID, start, nil, l.Limit)
		if err != nil {
			return nil, err
		}
		items, err := st.batchGet(ctx, refs, true)
		if err != nil {
			return nil, err
		}
		for i, a := range items {
			if a == nil || l.Kind != "" && a.Kind != l.Kind || l.State != "" && a.StateAt(l.Now) != l.State {
				continue
			}
			page.Actions = append(page.Actions, a)
			if len(page.Actions) == l.Limit {
				if i < len(refs)-1 || next != nil {
					page.Cursor = refs[i].cursor()
				}
				return page, nil
			}
		}
		if next == nil {
			return page, nil
		}
		start = next
	}
	page.Cursor = start.cursor()
	return page, nil
}

// userRefs reads up to limit index entries of a user after start (newest
// first), only those created at or before notAfter when it is set.
func (st *Store) userRefs(ctx context.Context, tenantName, userID string, start, notAfter *position, limit int) ([]position, *position, error) {
	var from map[string]types.AttributeValue
	if start != nil {
		from = map[string]types.AttributeValue{
			attrUserKey: s(userKey(tenantName, userID)), attrCreatedAtMs: n(start.CreatedAtMs), attrID: s(start.Key),
		}
	}
	return st.queryUser(ctx, tenantName, userID, from, notAfter, limit)
}

// queryUser is userRefs from the start key from (nil: the newest). A start
// key DynamoDB refuses can only have come from a cursor: ErrBadCursor.
func (st *Store) queryUser(ctx context.Context, tenantName, userID string, from map[string]types.AttributeValue, notAfter *position, limit int) ([]position, *position, error) {
	kc := expression.Key(attrUserKey).Equal(expression.Value(s(userKey(tenantName, userID))))
	if notAfter != nil {
		kc = kc.And(expression.Key(attrCreatedAtMs).LessThanEqual(expression.Value(n(notAfter.CreatedAtMs))))
	}
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, nil, err
	}
	in := &dynamodb.QueryInput{
		TableName:                 &st.table,
		IndexName:                 aws.String(UserIndex),
		KeyConditionExpression:    e.KeyCondition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
		ScanIndexForward:          aws.Bool(false),
		Limit:                     aws.Int32(int32(limit)),
		ExclusiveStartKey:         from,
	}
	out, err := st.db.Query(ctx, in)
	var apiErr smithy.APIError
	switch {
	case from != nil && errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException":
		return nil, nil, ErrBadCursor
	case err != nil:
		return nil, nil, classifyErr(err)
	}
	refs := make([]position, 0, len(out.Items))
	for _, it := range out.Items {
		d := dynamoitem.Decoder{Item: it}
		p := position{CreatedAtMs: d.Num(attrCreatedAtMs), Key: d.Str(attrID)}
		if d.Err != nil {
			return nil, nil, d.Err
		}
		refs = append(refs, p)
	}
	var next *position
	if lek := out.LastEvaluatedKey; lek != nil {
		d := dynamoitem.Decoder{Item: lek}
		next = &position{CreatedAtMs: d.Num(attrCreatedAtMs), Key: d.Str(attrID)}
	}
	return refs, next, nil
}

// listed are the attributes a listing reads: everything but the sealed
// payload and the PIN material it has no use for.
var listed = []string{attrUserID, attrKind, attrSupersedes, attrActiveAtMs, attrExpiresAtMs, attrCreatedAt, attrMetadata,
	attrConsumedAt, attrConsumedReason, attrCanceledAt, attrCancelReason, attrExpiredAt, attrPINHash,
	attrPINFailures, attrMaxPINAttempts, attrPINFailedAt, attrCancelKey, attrCancelFP, attrCancelReq,
	attrMaxUses, attrReleasable, legacyUsesHeld}

// batchGet reads the items of refs with strongly consistent reads, 100 per
// BatchGetItem, in refs' order (nil where an item is gone), and, with
// count, counts the uses the multi-use ones hold (from their gates).
func (st *Store) batchGet(ctx context.Context, refs []position, count bool) ([]*action.Action, error) {
	keys := make([]string, len(refs))
	for i, r := range refs {
		keys[i] = r.Key
	}
	raw, err := st.readItems(ctx, keys, listed)
	if err != nil {
		return nil, err
	}
	items := make([]*action.Action, len(refs))
	legacy := map[*action.Action]bool{}
	for i, it := range raw {
		if it == nil {
			continue
		}
		if items[i], err = Decode(it); err != nil {
			return nil, err
		}
		legacy[items[i]] = isLegacy(it)
	}
	if !count {
		return items, nil
	}
	if err := st.countHeld(ctx, items, func(a *action.Action) bool { return legacy[a] }, time.Now()); err != nil {
		return nil, err
	}
	return items, nil
}

// cancelAllRecord is the item that records a keyed cancel-all: in the
// key-item space (no event; no /keys route can name it, key names hold no
// '#'), by tenant and the key's digest, so a key is one cancel-all call in
// its tenant whatever user or body it is sent with.
func cancelAllRecord(tenantName, keyDigest string) string {
	return KeyPrefix + "ca#" + tenantName + "#" + keyDigest
}

// RecordCancelAll records a keyed cancel-all call with one conditional
// write, before it cancels anything: the first call with its key stores
// the call's fingerprint; a re-send with the same fingerprint (under any
// known key set) passes and reports replayed; another call with the key is
// refused (idempotency_key_reused), even when the first one canceled
// nothing. The record is kept for the store's retention.
func (st *Store) RecordCancelAll(ctx context.Context, tenantName string, w action.Write, fingerprints []string, now time.Time) (replayed bool, err error) {
	u := set(expression.UpdateBuilder{}, attrCancelFP, s(w.Fingerprint))
	u = set(u, attrCancelReq, s(w.RequestID))
	u = set(u, attrTTL, n(now.Add(st.retention).Unix()))
	cond := expression.AttributeNotExists(expression.Name(attrID)).
		Or(expression.Name(attrTTL).LessThanEqual(expression.Value(n(now.Unix()))))
	if len(fingerprints) > 0 {
		same := make([]expression.OperandBuilder, len(fingerprints))
		for i, fp := range fingerprints {
			same[i] = expression.Value(s(fp))
		}
		cond = cond.Or(expression.Name(attrCancelFP).In(same[0], same[1:]...))
	}
	old, refused, failed, err := st.exprWrite(ctx, cancelAllRecord(tenantName, w.Key), u, &cond, types.ReturnValueAllOld)
	switch {
	case err != nil:
		return false, err
	case failed:
		// A record under a key set the request cannot fingerprint with (a
		// function rotated first, or a secret retired) is not another body:
		// nothing is judged against it (the API learns the key, or 503).
		stored := dynamoitem.Decoder{Item: refused}
		if err := action.Comparable(stored.Str(attrCancelFP), fingerprints); err != nil {
			return false, err
		}
		return false, action.Reject(action.CodeKeyReused, nil)
	}
	// A record this very request wrote (the SDK re-sent the write after
	// its answer was lost) is the call's first answer, not a replay.
	d := dynamoitem.Decoder{Item: old}
	return old != nil && d.Num(attrTTL) > now.Unix() && (w.RequestID == "" || d.Str(attrCancelReq) != w.RequestID), nil
}

// supersedePointer is the item that names the latest superseding action of
// a user and kind. It sits in the key-item space (KeyPrefix: no publisher
// event, no /keys route can name it, since key names hold no '#'); kind
// and tenant hold no '#', so the userId may hold anything.
func supersedePointer(a *action.Action) string {
	return KeyPrefix + "sup#" + a.Kind + "#" + a.Tenant + "#" + a.UserID
}

// UserActions reads every action of a user (nil entries for items gone
// since the index listed them), newest first; notAfter, when set, leaves
// out those created after it. Costs: a Query per 100 actions of the user
// (the index is eventually consistent) and a BatchGetItem per 100. The
// uses multi-use actions hold are not counted (no caller needs them).
func (st *Store) UserActions(ctx context.Context, tenantName, userID string, notAfter time.Time) ([]*action.Action, error) {
	var bound *position
	if !notAfter.IsZero() {
		bound = &position{CreatedAtMs: notAfter.UnixMilli()}
	}
	var all []*action.Action
	var start *position
	for {
		// One entry more than a batch: a Query that returns exactly
		// MaxListLimit entries also returns a LastEvaluatedKey, and the
		// next Query would find nothing. With one more, that next Query is
		// sent only when there is something after the batch.
		refs, next, err := st.userRefs(ctx, tenantName, userID, start, bound, MaxListLimit+1)
		if err != nil {
			return nil, err
		}
		if len(refs) > MaxListLimit {
			refs, next = refs[:MaxListLimit], &refs[MaxListLimit-1]
		}
		items, err := st.batchGet(ctx, refs, false)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == nil {
			return all, nil
		}
		start = next
	}
}

// MoveSupersedePointer makes a the latest superseding action of its user
// and kind with ONE conditional write on the pointer item, unless a later
// one holds it: then superseded is true (a must be canceled). Otherwise
// replaced is the id of the action the pointer named before (to cancel;
// "" for none), also when a's create is re-sent (replayed) after its first
// attempt moved the pointer.
//
// The clocks of two instances may differ by up to action.MaxClockSkew, so
// creation times decide only beyond it. A first create takes the pointer
// unless its holder was created more than that after it: the order of
// pointer writes is the real order of the two calls, as far as one had
// ended before the other began. A re-sent create takes it back only from a
// holder created more than that before it: a holder closer in time may be
// a newer create that superseded it. With onlyMine (a re-send while a's
// first attempt may still run) the write passes only when the pointer
// already names a: otherwise superseded is true and nothing is written.
func (st *Store) MoveSupersedePointer(ctx context.Context, a *action.Action, replayed, onlyMine bool) (replaced string, superseded bool, err error) {
	pk := tenant.ItemKey(a.Tenant, a.ID)
	latestKey, latestMs := expression.Name("latestKey"), expression.Name("latestMs")
	u := set(expression.UpdateBuilder{}, "latestKey", s(pk))
	u = set(u, "latestMs", n(a.CreatedAt.UnixMilli()))
	u = set(u, attrTTL, n(a.ExpiresAt.Add(st.retention).Unix()))
	floor := a.CreatedAt.Add(action.MaxClockSkew)
	if replayed {
		floor = a.CreatedAt.Add(-action.MaxClockSkew)
	}
	if !replayed {
		// The pointer remembers whom a replaced (the holder before this
		// write; operands read the item as it was), so a re-sent create
		// whose first attempt moved the pointer but failed to cancel that
		// action can still cancel it: its own re-send leaves prevKey alone.
		u = u.Set(expression.Name("prevKey"), expression.IfNotExists(latestKey, expression.Value(s(pk))))
	}
	cond := expression.Or(expression.AttributeNotExists(latestKey),
		latestKey.Equal(expression.Value(s(pk))),
		latestMs.LessThan(expression.Value(n(floor.UnixMilli()))))
	if onlyMine {
		// a's first attempt may still be on its way to this write: only
		// it moves the pointer to a, once, so its order is the real one.
		cond = latestKey.Equal(expression.Value(s(pk)))
	}
	prev, _, failed, err := st.exprWrite(ctx, supersedePointer(a), u, &cond, types.ReturnValueAllOld)
	if err != nil || failed {
		return "", failed, err
	}
	held, _ := prev["latestKey"].(*types.AttributeValueMemberS)
	if held != nil && held.Value == pk {
		// a's own earlier write moved the pointer (a re-send): the action
		// it replaced then is canceled now, if that cancel was cut short.
		held, _ = prev["prevKey"].(*types.AttributeValueMemberS)
	}
	if held == nil || held.Value == pk {
		return "", false, nil
	}
	_, id := tenant.SplitItemKey(held.Value)
	return id, false, nil
}
