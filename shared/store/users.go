package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"sync"
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
		items, err := st.batchGet(ctx, refs)
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
// BatchGetItem, in refs' order (nil where an item is gone), and counts the
// uses the multi-use ones hold (from their gates).
func (st *Store) batchGet(ctx context.Context, refs []position) ([]*action.Action, error) {
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
	if err := st.countHeld(ctx, items, func(a *action.Action) bool { return legacy[a] }, time.Now()); err != nil {
		return nil, err
	}
	return items, nil
}

// CancelAll is a request to cancel every open action of a user.
type CancelAll struct {
	Tenant, UserID string
	Kind           string // "" for every kind, unless ExactKind
	ExactKind      bool   // Kind "" means the actions without a kind

	Reason string
	// Write is the call's: its key is the cancel-all's own, scoped to the
	// operation, so a cancel of one action with the same key is another
	// call (and the reverse).
	Write action.Write
	// BareKey is the key's unscoped digest, as cancel-alls stored it on
	// the actions they canceled before keys were scoped: a retry of such a
	// call still recognises them (its fingerprint names the route, so no
	// cancel of one action matches).
	BareKey      string
	Fingerprints []string
	Now          time.Time // the request's time: which actions are still open
	// Clock is read for each cancel's own time (canceledAt), which comes
	// after the reads however long they took; nil: Now.
	Clock func() time.Time
	// Except, when set, spares this action and everything created after it
	// (a superseding create cancels only what came before it).
	Except *action.Action
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
	old, _, failed, err := st.exprWrite(ctx, cancelAllRecord(tenantName, w.Key), u, &cond, types.ReturnValueAllOld)
	switch {
	case err != nil:
		return false, err
	case failed:
		return false, action.Reject(action.CodeKeyReused, nil)
	}
	d := dynamoitem.Decoder{Item: old}
	return old != nil && d.Num(attrTTL) > now.Unix(), nil
}

// cancelParallel is how many cancels of one call are in flight at once.
const cancelParallel = 8

// CancelUser cancels every open action of a user (of one kind), each with
// its own conditional write, so a consume racing it either won (the action
// stays consumed) or lost (it is canceled), never both. It returns the ids
// this call canceled, including those a retry of the same keyed call finds
// canceled by itself. Costs: a Query per 100 actions of the user, a
// BatchGetItem per 100, and one UpdateItem per open action.
func (st *Store) CancelUser(ctx context.Context, c CancelAll) ([]string, error) {
	var notAfter *position
	if c.Except != nil {
		notAfter = &position{CreatedAtMs: c.Except.CreatedAt.UnixMilli()}
	}
	// Read everything first: a keyed call is judged against what its key
	// already did before anything is written.
	var all []*action.Action
	var start *position
	for {
		refs, next, err := st.userRefs(ctx, c.Tenant, c.UserID, start, notAfter, MaxListLimit)
		if err != nil {
			return nil, err
		}
		items, err := st.batchGet(ctx, refs)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == nil {
			break
		}
		start = next
	}
	var canceled []string
	var todo []*action.Action
	at := action.Attempt{Key: c.Write.Key, Fingerprints: c.Fingerprints, RequestID: c.Write.RequestID}
	for _, a := range all {
		if a == nil {
			continue
		}
		if !a.CanceledAt.IsZero() && c.Write.Key != "" && a.Cancel.Key == c.Write.Key {
			// Canceled under this call's key: by this call (a retry: answer
			// it again), or by another body under the same key (422).
			why := action.ClassifyCancel(a, at)
			if _, ok := why.(*action.Replay); !ok {
				return nil, why
			}
			canceled = append(canceled, a.ID)
			continue
		}
		if !a.CanceledAt.IsZero() && action.IsReplayOf(a.Cancel, c.BareKey, c.Fingerprints) {
			canceled = append(canceled, a.ID) // by this call, before keys were scoped
			continue
		}
		if (c.Kind != "" || c.ExactKind) && a.Kind != c.Kind || c.Except != nil && !supersededBy(a, c.Except) {
			continue
		}
		if !a.Finished() && c.Now.Before(a.ExpiresAt) {
			todo = append(todo, a)
		}
	}
	ids, err := st.cancelEach(ctx, todo, c)
	canceled = append(canceled, ids...)
	slices.Sort(canceled) // the same answer however a retry found them
	return canceled, err
}

// MaxClockSkew bounds how far the clocks of two API instances may differ.
// Supersede trusts creation times only beyond it: among superseding creates
// less than MaxClockSkew apart the pointer item's write order decides.
const MaxClockSkew = time.Second

// supersededBy reports whether the superseding create b cancels a by time:
// a plain action created before it, or a superseding one created more than
// MaxClockSkew before it (closer ones are ordered by the pointer, which
// cancels each action it moves away from).
func supersededBy(a, b *action.Action) bool {
	if a.Supersedes {
		return a.CreatedAt.Before(b.CreatedAt.Add(-MaxClockSkew))
	}
	return before(a, b)
}

// before reports whether a was created before b (ties broken by id).
func before(a, b *action.Action) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.ID < b.ID
}

// cancelEach cancels the actions, cancelParallel at a time; it returns the
// ids it canceled and the first dependency error.
func (st *Store) cancelEach(ctx context.Context, todo []*action.Action, c CancelAll) ([]string, error) {
	var mu sync.Mutex
	var ids []string
	var firstErr error
	sem := make(chan struct{}, cancelParallel)
	var wg sync.WaitGroup
	for _, a := range todo {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			now := c.Now
			if c.Clock != nil {
				now = c.Clock()
			}
			_, err := st.Cancel(ctx, a.ID, Cancel{Tenant: c.Tenant, Reason: c.Reason, Write: c.Write, Fingerprints: c.Fingerprints, Now: now})
			var replay *action.Replay
			var rej *action.Rejection
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ids = append(ids, a.ID)
			case errors.As(err, &replay):
				if action.IsReplayOf(replay.Action.Cancel, c.Write.Key, c.Fingerprints) {
					ids = append(ids, a.ID)
				}
			case errors.As(err, &rej): // consumed or expired meanwhile: it won
			case firstErr == nil:
				firstErr = err
			}
		})
	}
	wg.Wait()
	slices.Sort(ids)
	return ids, firstErr
}

// supersedePointer is the item that names the latest superseding action of
// a user and kind. It sits in the key-item space (KeyPrefix: no publisher
// event, no /keys route can name it, since key names hold no '#'); kind
// and tenant hold no '#', so the userId may hold anything.
func supersedePointer(a *action.Action) string {
	return KeyPrefix + "sup#" + a.Kind + "#" + a.Tenant + "#" + a.UserID
}

// Supersede makes a (just created, or its create replayed) the user's one
// open action of its kind: every open action of that user and kind created
// before a is canceled with reason "superseded", each by its own
// conditional write, so a consume that already won keeps its win.
//
// The user index is eventually consistent, so two superseding creates a
// moment apart might not see each other there, and the clocks of two
// instances may disagree (by up to MaxClockSkew). A pointer item settles
// it: one conditional write moves it to the newer of the two (the later
// pointer write, unless creation times differ by more than MaxClockSkew;
// see the condition below) and returns the action it named before, which
// is canceled; a create whose write fails cancels itself. So at most one
// of concurrent superseding creates stays open. replayed says a's create
// was re-sent. It returns the ids it canceled (a itself among them when a
// newer one had already superseded it).
func (st *Store) Supersede(ctx context.Context, a *action.Action, requestID string, replayed bool, now time.Time) ([]string, error) {
	pk := tenant.ItemKey(a.Tenant, a.ID)
	latestKey, latestMs := expression.Name("latestKey"), expression.Name("latestMs")
	u := set(expression.UpdateBuilder{}, "latestKey", s(pk))
	u = set(u, "latestMs", n(a.CreatedAt.UnixMilli()))
	u = set(u, attrTTL, n(a.ExpiresAt.Add(st.retention).Unix()))
	// The clocks of two instances may differ by up to MaxClockSkew, so
	// creation times decide only beyond it. A first create takes the
	// pointer unless its holder was created more than that after it: the
	// order of pointer writes is the real order of the two calls, as far as
	// one had ended before the other began. A re-sent create takes it back
	// only from a holder created more than that before it: a holder closer
	// in time may be a newer create that superseded it.
	floor := a.CreatedAt.Add(MaxClockSkew)
	if replayed {
		floor = a.CreatedAt.Add(-MaxClockSkew)
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
	prev, _, failed, err := st.exprWrite(ctx, supersedePointer(a), u, &cond, types.ReturnValueAllOld)
	write := action.Write{RequestID: requestID}
	cancel := func(id string) ([]string, error) {
		return st.cancelEach(ctx, []*action.Action{{ID: id}}, CancelAll{Tenant: a.Tenant, Reason: ReasonSuperseded, Write: write, Now: now})
	}
	switch {
	case err != nil:
		return nil, err
	case failed: // a later superseding create holds the pointer: a is superseded
		return cancel(a.ID)
	}
	var canceled []string
	replaced, _ := prev["latestKey"].(*types.AttributeValueMemberS)
	if replaced != nil && replaced.Value == pk {
		// a's own earlier write moved the pointer (a re-send): the action
		// it replaced then is canceled now, if that cancel was cut short.
		replaced, _ = prev["prevKey"].(*types.AttributeValueMemberS)
	}
	if replaced != nil && replaced.Value != pk {
		_, id := tenant.SplitItemKey(replaced.Value)
		if canceled, err = cancel(id); err != nil {
			return canceled, err
		}
	}
	more, err := st.CancelUser(ctx, CancelAll{Tenant: a.Tenant, UserID: a.UserID, Kind: a.Kind, ExactKind: true, Reason: ReasonSuperseded,
		Write: write, Now: now, Except: a})
	for _, id := range more {
		if !slices.Contains(canceled, id) {
			canceled = append(canceled, id)
		}
	}
	slices.Sort(canceled)
	return canceled, err
}

// ReasonSuperseded is the cancelReason of an action a newer one superseded.
const ReasonSuperseded = "superseded"
