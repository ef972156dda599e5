// Package store keeps actions in DynamoDB. Every state change is ONE
// conditional UpdateItem: the item is the lock, and when the condition fails
// the same call returns the old item (ReturnValuesOnConditionCheckFailure =
// ALL_OLD), from which the domain classifies the outcome. No read precedes a
// write anywhere.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/dynamostore"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/tenant"
)

// DefaultRetention is how long a finished action is kept (DynamoDB TTL) so
// late callers still get 409/410 rather than 404.
const DefaultRetention = 30 * 24 * time.Hour

// ErrUnavailable wraps DynamoDB throttling, 5xx and network faults: the
// outcome is unknown and the caller may retry.
var ErrUnavailable = errors.New("store: dynamodb unavailable")

// DefaultExpiryShards is how many partitions the expiry index spreads
// actions over (by a hash of the id). Every create writes the index (the
// writes that finish an action do not), and one index partition takes
// about 1,000 writes/s, so 16 shards absorb ~16,000 creates/s (far above
// the API's default stage throttle); the sweeper's idle cost is one
// watermark read and 16 small Queries a minute. Raise it, never lower it,
// on a live table (actions in dropped shards would only expire by TTL).
const DefaultExpiryShards = 16

// Options tune a Store; zero values mean the defaults.
type Options struct {
	Retention    time.Duration // DefaultRetention
	ExpiryShards int           // DefaultExpiryShards
	KeyRetention time.Duration // idempotency.DefaultRetention
}

// Store reads and writes action items in one table.
type Store struct {
	db           *dynamodb.Client
	table        string
	retention    time.Duration
	shards       int
	keyRetention time.Duration
	keys         *dynamostore.Table
	cache        actionCache // multi-use actions' create-time fields, for takes and releases
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
		o.KeyRetention = idempotency.DefaultRetention
	}
	st := &Store{db: db, table: table, retention: o.Retention, shards: o.ExpiryShards, keyRetention: o.KeyRetention}
	st.keys = st.keyTable()
	return st
}

// ExpiryShards is the number of partitions of the expiry index.
func (st *Store) ExpiryShards() int { return st.shards }

// Table is the table's name.
func (st *Store) Table() string { return st.table }

// Retention is how long finished actions stay readable.
func (st *Store) Retention() time.Duration { return st.retention }

// The conditions, built with the SDK's expression builder.

// unfinished: the action exists and no operation finished it.
func unfinished() expression.ConditionBuilder {
	return expression.And(expression.AttributeExists(expression.Name(attrID)),
		expression.AttributeNotExists(expression.Name(attrConsumedAt)),
		expression.AttributeNotExists(expression.Name(attrCanceledAt)),
		expression.AttributeNotExists(expression.Name(attrExpiredAt)))
}

// open: unfinished and not yet expired at now.
func open(now time.Time) expression.ConditionBuilder {
	return unfinished().And(expression.Name(attrExpiresAtMs).GreaterThan(expression.Value(n(now.UnixMilli()))))
}

// consumable: open and active at now.
func consumable(now time.Time) expression.ConditionBuilder {
	return open(now).And(expression.Name(attrActiveAtMs).LessThanEqual(expression.Value(n(now.UnixMilli()))))
}

// noPIN: the action has no PIN.
func noPIN() expression.ConditionBuilder {
	return expression.AttributeNotExists(expression.Name(attrPINHash))
}

// single: not a multi-use action (those take uses, see Take).
func single() expression.ConditionBuilder {
	return expression.AttributeNotExists(expression.Name(attrMaxUses))
}

// guessLeft: a guess may be reserved while guesses remain.
func guessLeft() expression.ConditionBuilder {
	return expression.AttributeExists(expression.Name(attrPINHash)).
		And(expression.Name(attrPINFailures).LessThan(expression.Name(attrMaxPINAttempts)))
}

// pinTry names the attribute of a guess's token (a caller's request id may
// hold a dot: the name is never split into a path).
func pinTry(prefix, token string) expression.NameBuilder {
	return expression.NameNoDotSplit(prefix + token)
}

// Create writes a new action; the item must not exist. On a failed condition
// it returns the domain's classification: *action.Replay for a retry of the
// same call, a *action.Rejection otherwise (one that compared the request
// with a stored body holding the PIN is a guess the caller counts:
// SpendGuess). fingerprints are the request's under every known key set (a
// retry matches whichever its first attempt stored).
func (st *Store) Create(ctx context.Context, a *action.Action, fingerprints []string) (*action.Action, error) {
	pk := tenant.ItemKey(a.Tenant, a.ID)
	u := set(expression.UpdateBuilder{}, attrUserID, s(a.UserID))
	u = setIf(u, attrKind, a.Kind)
	if a.Supersedes {
		u = set(u, attrSupersedes, s("1"))
	}
	u = set(u, attrActiveAtMs, n(a.ActiveAt.UnixMilli()))
	u = set(u, attrExpiresAtMs, n(a.ExpiresAt.UnixMilli()))
	u = set(u, attrCreatedAt, ts(a.CreatedAt))
	u = set(u, attrCreatedAtMs, n(a.CreatedAt.UnixMilli())) // the user index's sort key
	u = set(u, attrUserKey, s(userKey(a.Tenant, a.UserID))) // and its partition key: written here only
	u = set(u, attrTTL, n(a.ExpiresAt.Add(st.retention).Unix()))
	u = set(u, attrExpShard, s(expiryShard(pk, st.shards)))
	if len(a.Metadata) > 0 {
		m := make(map[string]types.AttributeValue, len(a.Metadata))
		for k, v := range a.Metadata {
			m[k] = s(v)
		}
		u = set(u, attrMetadata, &types.AttributeValueMemberM{Value: m})
	}
	if a.PINProtected() {
		u = set(u, attrPINHash, b(a.PINHash))
		u = set(u, attrPINFailures, n(0))
		u = set(u, attrMaxPINAttempts, n(int64(a.MaxPINAttempts)))
	}
	if a.Payload != nil {
		u = set(u, attrPayload, b(a.Payload))
	}
	if a.MultiUse() {
		u = setUses(u, a)
	}
	u = setIf(u, attrKeyID, a.KeyID)
	u = setWrite(u, attrCreateKey, attrCreateFP, attrCreateReq, a.Create)

	_, old, err := st.update(ctx, pk, u, expression.AttributeNotExists(expression.Name(attrID)), types.ReturnValueNone)
	if err != nil {
		return nil, err
	}
	if old != nil {
		return nil, action.ClassifyCreate(old, action.Attempt{Key: a.Create.Key, Fingerprints: fingerprints, RequestID: a.Create.RequestID})
	}
	return a, nil
}

// FindCreate answers a create that can no longer be written (its expiresAt
// has passed) but may be the retry of one that was: with one consistent read
// it returns the domain's classification of the create against the item
// (as Create's), or nil when there is no such item.
func (st *Store) FindCreate(ctx context.Context, tenantName, id string, w action.Write, fingerprints []string) error {
	a, err := st.Get(ctx, tenantName, id)
	var r *action.Rejection
	switch {
	case errors.As(err, &r) && r.Code == action.CodeNotFound:
		return nil
	case err != nil:
		return err
	}
	return action.ClassifyCreate(a, action.Attempt{Key: w.Key, Fingerprints: fingerprints, RequestID: w.RequestID})
}

// Get reads a tenant's action with a strongly consistent read. Another
// tenant's action of the same id is another item: not found. A multi-use
// action's uses held are counted from its gates (one more request, a
// BatchGetItem per 100 gates).
func (st *Store) Get(ctx context.Context, tenantName, id string) (*action.Action, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &st.table,
		Key:            key(tenant.ItemKey(tenantName, id)),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, classifyErr(err)
	}
	if out.Item == nil {
		return nil, action.Reject(action.CodeNotFound, nil)
	}
	a, err := Decode(out.Item)
	if err != nil {
		return nil, err
	}
	if a.MultiUse() && !isLegacy(out.Item) {
		if err := st.countHeld(ctx, []*action.Action{a}, nil, time.Now()); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Consume is the consuming write's request.
type Consume struct {
	Tenant       string // whose action: the id is looked up in its key space
	Reason       string
	Write        action.Write
	Fingerprints []string // the request's under every known key set
	// KeyIDs are the key sets this server knows: an action under another
	// is refused before anything is written (see action.UnknownKeyError).
	KeyIDs []string
	// Now is the write's time (consumedAt).
	Now time.Time
	// PINPresented says the request carried a PIN (a refusal is classified
	// with it).
	PINPresented bool
	// Reserved says the request's guess is reserved (ReserveGuess) and its
	// PIN matched: the write needs that reservation, and gives it back.
	// Without it the action must have no PIN.
	Reserved bool
}

// Consume moves the action to consumed with one conditional write and
// returns it as written. A refusal is classified (action.ClassifyConsume);
// one that compared the request with a stored body holding the PIN is a
// guess the caller counts (SpendGuess).
func (st *Store) Consume(ctx context.Context, id string, c Consume) (*action.Action, error) {
	pk := tenant.ItemKey(c.Tenant, id)
	now := action.Millis(c.Now)
	cond := consumable(now).And(noPIN())
	u := set(expression.UpdateBuilder{}, attrConsumedAt, ts(now))
	if c.Reserved {
		cond = consumable(now).And(expression.AttributeExists(pinTry(attrPINTry, action.TryToken(c.Write))))
		u = u.Set(expression.Name(attrPINFailures), expression.Name(attrPINFailures).Minus(expression.Value(n(1))))
		// What this consume answers, kept for its replays (both read the
		// count before this write).
		u = u.Set(expression.Name(attrConsumePINFail), expression.Name(attrPINFailures).Minus(expression.Value(n(1))))
	}
	u = setIf(u, attrConsumedReason, c.Reason)
	u = set(u, attrTTL, n(now.Add(st.retention).Unix()))
	u = setWrite(u, attrConsumeKey, attrConsumeFP, attrConsumeReq, c.Write)
	written, old, err := st.update(ctx, pk, u, expression.And(cond, single(), knownKeys(c.KeyIDs)), types.ReturnValueAllNew)
	if err != nil {
		return nil, err
	}
	if old == nil {
		return written, nil
	}
	at := action.Attempt{Now: now, Key: c.Write.Key, Fingerprints: c.Fingerprints, RequestID: c.Write.RequestID, PINPresented: c.PINPresented}
	why := action.ClassifyConsume(old, at)
	if r, ok := why.(*action.Rejection); ok && r.Code == action.CodeInternal && !slices.Contains(c.KeyIDs, old.KeyID) && old.KeyID != "" {
		return nil, &action.UnknownKeyError{KeyID: old.KeyID}
	}
	return nil, why
}

// ReserveGuess counts the request's PIN guess before it is compared, with
// one conditional write at c.Now: the count grows by one, recorded under the
// request's TryToken with its fingerprint, only while the action is
// consumable, has guesses left, is under a key set this server knows and
// holds no reservation of this request. It returns the item as written, or,
// when the condition failed, the item as it was (old).
func (st *Store) ReserveGuess(ctx context.Context, id string, c Consume) (reserved, old *action.Action, err error) {
	now := action.Millis(c.Now)
	token := action.TryToken(c.Write)
	u := countGuess(now).
		Set(pinTry(attrPINTry, token), expression.Name(attrPINFailures).Plus(expression.Value(n(1)))).
		Set(pinTry(attrPINTryFP, token), expression.Value(s(c.Write.Fingerprint)))
	cond := expression.And(consumable(now), guessLeft(), expression.AttributeNotExists(pinTry(attrPINTry, token)), knownKeys(c.KeyIDs))
	return st.update(ctx, tenant.ItemKey(c.Tenant, id), u, cond, types.ReturnValueAllNew)
}

// knownKeys is the condition that the action is under one of the key sets
// this server knows (or under none).
func knownKeys(ids []string) expression.ConditionBuilder {
	none := expression.AttributeNotExists(expression.Name(attrKeyID))
	if len(ids) == 0 {
		return none
	}
	in := make([]expression.OperandBuilder, len(ids))
	for i, id := range ids {
		in[i] = expression.Value(s(id))
	}
	return none.Or(expression.Name(attrKeyID).In(in[0], in[1:]...))
}

// countGuess is the update of one more guess counted, and its time.
func countGuess(now time.Time) expression.UpdateBuilder {
	failedAt := expression.Name(attrPINFailedAt)
	return expression.Set(expression.Name(attrPINFailures), expression.Name(attrPINFailures).Plus(expression.Value(n(1)))).
		Set(failedAt, expression.ListAppend(
			expression.IfNotExists(failedAt, expression.Value(&types.AttributeValueMemberL{Value: []types.AttributeValue{}})),
			expression.Value(&types.AttributeValueMemberL{Value: []types.AttributeValue{ts(now)}})))
}

// SpendGuess counts, with one conditional write at now, a comparison of the
// request w with a stored body holding the PIN (action.IsGuess) like any
// guess; once no guess is left the answer is locked. The write records the
// guess under the request's key and body (action.SpendToken), like a
// reservation: the SDK re-sending it after a lost answer, or the caller
// re-sending the same request, finds it and is answered the same 422,
// counting nothing. fingerprints are the request's body under every known
// key set: the same request re-sent across a rotation (its body taken under
// another key set) finds its guess too. It returns the refusal: key_reused,
// or locked.
func (st *Store) SpendGuess(ctx context.Context, tenantName, id string, w action.Write, now time.Time, fingerprints ...string) error {
	token := action.SpendToken(w)
	tokens := []string{token}
	for _, fp := range fingerprints {
		if t := action.SpendToken(action.Write{Key: w.Key, Fingerprint: fp}); !slices.Contains(tokens, t) {
			tokens = append(tokens, t)
		}
	}
	u := countGuess(action.Millis(now)).
		Set(pinTry(attrPINTry, token), expression.Name(attrPINFailures).Plus(expression.Value(n(1))))
	cond := guessLeft()
	for _, t := range tokens {
		cond = cond.And(expression.AttributeNotExists(pinTry(attrPINTry, t)))
	}
	written, old, err := st.update(ctx, tenant.ItemKey(tenantName, id), u, cond, types.ReturnValueAllNew)
	switch {
	case err != nil:
		return err
	case old != nil:
		for _, t := range tokens {
			if try, ok := old.PINTries[t]; ok { // this request's guess, counted already
				seen := *old
				seen.PINFailures = try.N
				return action.Reject(action.CodeKeyReused, &seen)
			}
		}
		return action.Reject(action.CodeLocked, old)
	}
	return action.Reject(action.CodeKeyReused, written)
}

// Cancel is a request to cancel an action.
type Cancel struct {
	Tenant       string // whose action
	Reason       string
	Write        action.Write
	Fingerprints []string // the request's under every known key set
	Now          time.Time
	// NoCount: the caller needs only whether the action was canceled (a
	// cancel-all or a supersede), so a multi-use action's uses held are not
	// counted (a read of each of its gates).
	NoCount bool
}

// Cancel marks an open action canceled with one conditional write.
// Canceling a canceled action answers with the first cancellation
// (*action.Replay). A multi-use action's gates are closed first (one write
// each, creating the ones no take wrote yet), then the action's write,
// stamped after every use its gates held: no take or release commits after
// the cancel, and none is stamped after it.
func (st *Store) Cancel(ctx context.Context, id string, c Cancel) (*action.Action, error) {
	pk := tenant.ItemKey(c.Tenant, id)
	now := action.Millis(c.Now)
	written, old, err := st.cancelWrite(ctx, pk, c, now, now.Add(st.retention).Unix(), open(now).And(single()))
	if err == nil && old != nil && old.MultiUse() && old.CanceledAt.IsZero() && old.ConsumedAt.IsZero() && old.ExpiredAt.IsZero() && now.Before(old.ExpiresAt) {
		// The closed gates keep the end of retention they had (the open
		// action's, as its records do), and the canceled item takes it
		// too: a cancel that stopped after closing them leaves an open
		// action whose closed gates last as long as it does (gates gone
		// before it, purged or deleted by TTL, let takes in again, past
		// maxUses). Item, gates and records then go together.
		ttl := st.ttlOf(old)
		latest, cerr := st.closeGates(ctx, old, c, ttl)
		if cerr != nil {
			return nil, cerr
		}
		st.cache.drop(pk)
		if !latest.Before(now) {
			now = latest.Add(time.Millisecond)
		}
		written, old, err = st.cancelWrite(ctx, pk, c, now, ttl, open(now))
	}
	if err != nil {
		return nil, err
	}
	if old != nil {
		return nil, action.ClassifyCancel(old, action.Attempt{Now: now, Key: c.Write.Key, Fingerprints: c.Fingerprints, RequestID: c.Write.RequestID})
	}
	if written.MultiUse() && !c.NoCount {
		if err := st.countHeld(ctx, []*action.Action{written}, nil, now); err != nil {
			return nil, err
		}
	}
	return written, nil
}

// cancelWrite is a cancel's conditional write on the action's item, at now.
func (st *Store) cancelWrite(ctx context.Context, pk string, c Cancel, now time.Time, ttl int64, cond expression.ConditionBuilder) (written, old *action.Action, err error) {
	u := set(expression.UpdateBuilder{}, attrCanceledAt, ts(now))
	u = setIf(u, attrCancelReason, c.Reason)
	u = set(u, attrTTL, n(ttl))
	u = setWrite(u, attrCancelKey, attrCancelFP, attrCancelReq, c.Write)
	return st.update(ctx, pk, u, cond, types.ReturnValueAllNew)
}

// update runs one conditional UpdateItem on an action. It returns the item
// as written (when rv asks for it), or the old item when the condition failed
// (old is then non-nil, or nil with a not-found Rejection), or a dependency error.
func (st *Store) update(ctx context.Context, id string, u expression.UpdateBuilder, cond expression.ConditionBuilder, rv types.ReturnValue) (written, old *action.Action, err error) {
	w, o, failed, err := st.exprWrite(ctx, id, u, &cond, rv)
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

// setWrite records which request performed an operation.
func setWrite(u expression.UpdateBuilder, keyAttr, fpAttr, reqAttr string, w action.Write) expression.UpdateBuilder {
	u = setIf(u, keyAttr, w.Key)
	u = setIf(u, fpAttr, w.Fingerprint)
	return setIf(u, reqAttr, w.RequestID)
}

// set adds SET attr = v to u.
func set(u expression.UpdateBuilder, attr string, v types.AttributeValue) expression.UpdateBuilder {
	return u.Set(expression.Name(attr), expression.Value(v))
}

// setIf adds the SET only when the string is not empty (an absent field is
// not stored, so attribute_exists means "was given").
func setIf(u expression.UpdateBuilder, attr, v string) expression.UpdateBuilder {
	if v == "" {
		return u
	}
	return set(u, attr, s(v))
}

func key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrID: s(id)}
}

// classifyErr maps an SDK error: throttling, server faults, transport errors
// and a multi-Region write conflict the SDK's retries did not get past are
// ErrUnavailable (retryable); anything else is a bug on our side.
func classifyErr(err error) error {
	var apiErr smithy.APIError
	// An HTTP 5xx is the service's fault whatever its code says: DynamoDB's
	// 503 ServiceUnavailableException is not in its model, so the SDK
	// reports it as a generic error of unknown fault.
	var resp interface{ HTTPStatusCode() int }
	serverFault := errors.As(err, &resp) && resp.HTTPStatusCode() >= 500
	if errors.As(err, &apiErr) && apiErr.ErrorFault() != smithy.FaultServer && !serverFault && !throttling(apiErr.ErrorCode()) {
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
		"LimitExceededException", "TransactionConflictException",
		"ReplicatedWriteConflictException": // MRSC: another Region is writing the item; nothing was applied
		return true
	}
	return false
}
