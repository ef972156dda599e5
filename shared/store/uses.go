package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	mathrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/backoff"
	"github.com/exactonce/exactonce/internal/dynamoitem"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/tenant"
)

// Attributes of an action's multi-use settings (a single-use item has none).
const (
	attrMaxUses    = "maxUses"
	attrReleasable = "releasable" // true, or absent
)

// The attributes of a use record that conditions and projections name
// (recordItem's tags).
const (
	rAction     = "a"
	rUseID      = "u"
	rUsedAt     = "ua"
	rReleasedAt = "ra"
	rRelRef     = "rx"
	rOutcome    = "o"
	rHolder     = "hr"
	rHeldUntil  = "hl"
)

// recordItem is a use record (what one take or release call did) as
// stored: attributevalue maps it. Times are Unix milliseconds; a zero field
// is not written, and an absent one reads as zero.
type recordItem struct {
	Op          string `dynamodbav:"op,omitempty"`
	Action      int64  `dynamodbav:"a,omitempty"` // the action's createdAt: a record of an earlier action of the same id is stale
	UseID       string `dynamodbav:"u,omitempty"`
	Reason      string `dynamodbav:"r,omitempty"`
	RequestedAt int64  `dynamodbav:"q,omitempty"`
	Key         string `dynamodbav:"k,omitempty"`
	Fingerprint string `dynamodbav:"f,omitempty"`
	RequestID   string `dynamodbav:"rq,omitempty"`
	Outcome     string `dynamodbav:"o,omitempty"`
	Of          string `dynamodbav:"of,omitempty"`
	UsedAt      int64  `dynamodbav:"ua,omitempty"`
	ReleasedAt  int64  `dynamodbav:"ra,omitempty"`
	RelKey      string `dynamodbav:"rk,omitempty"`
	RelFP       string `dynamodbav:"rf,omitempty"`
	RelReq      string `dynamodbav:"rr,omitempty"`
	RelRef      string `dynamodbav:"rx,omitempty"` // the releasing call's record name
	Holder      string `dynamodbav:"hr,omitempty"` // a take: the request id of the attempt in charge
	HeldUntil   int64  `dynamodbav:"hl,omitempty"` // until when
	TTL         int64  `dynamodbav:"ttl,omitempty"`
}

// setRecord adds SET name = value to upd for each attribute r has.
func setRecord(upd expression.UpdateBuilder, r recordItem) (expression.UpdateBuilder, error) {
	av, err := attributevalue.MarshalMap(r)
	if err != nil {
		return upd, err
	}
	for _, name := range slices.Sorted(maps.Keys(av)) {
		upd = upd.Set(expression.Name(name), expression.Value(av[name]))
	}
	return upd, nil
}

// ms is t in Unix milliseconds, 0 for the zero time; fromMs the reverse.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// setUses adds a multi-use action's settings to its create: its uses
// live in gates, nothing more is on its item.
func setUses(u expression.UpdateBuilder, a *action.Action) expression.UpdateBuilder {
	u = set(u, attrMaxUses, n(int64(a.MaxUses)))
	if a.Releasable {
		u = set(u, attrReleasable, &types.AttributeValueMemberBOOL{Value: true})
	}
	return u
}

// decodeUses reads a multi-use action's settings (and the count a legacy
// item keeps on itself; see legacy.go).
func decodeUses(d *dynamoitem.Decoder, a *action.Action) {
	a.MaxUses = int(d.Num(attrMaxUses))
	if !a.MultiUse() {
		return
	}
	switch v := d.Item[attrReleasable].(type) {
	case nil:
	case *types.AttributeValueMemberBOOL:
		a.Releasable = v.Value
	default:
		d.Fail(attrReleasable)
	}
	a.UsesHeld = int(d.Num(legacyUsesHeld))
}

// DecodeRecord reads a use record.
func DecodeRecord(item map[string]types.AttributeValue) (*action.UseRecord, error) {
	var ri recordItem
	err := attributevalue.UnmarshalMap(item, &ri)
	var pk string
	if v, ok := item[attrID].(*types.AttributeValueMemberS); ok {
		pk = v.Value
	}
	r := &action.UseRecord{
		Op: ri.Op, UseID: ri.UseID, Reason: ri.Reason,
		Write:       action.Write{Key: ri.Key, Fingerprint: ri.Fingerprint, RequestID: ri.RequestID},
		RequestedAt: fromMs(ri.RequestedAt), Outcome: action.Code(ri.Outcome), Of: ri.Of,
		UsedAt: fromMs(ri.UsedAt), ReleasedAt: fromMs(ri.ReleasedAt),
		Release: action.Write{Key: ri.RelKey, Fingerprint: ri.RelFP, RequestID: ri.RelReq}, ReleaseRef: ri.RelRef,
		Holder: ri.Holder, HeldUntil: fromMs(ri.HeldUntil), ActionCreatedAt: fromMs(ri.Action),
	}
	if rest, ok := strings.CutPrefix(pk, recordPrefix); ok && len(rest) > 12 {
		r.Ref = rest[:12]
	}
	if err != nil || r.Ref == "" || r.UseID == "" {
		return nil, errors.Join(err, errors.New("store: malformed use record "+pk))
	}
	return r, nil
}

// putRecord writes the record of a call before its gate write, unless a
// record of that call (of this action) is there: then it returns that one
// and writes nothing. One conditional write.
func (st *Store) putRecord(ctx context.Context, a *action.Action, rec *action.UseRecord, ttl int64, now time.Time) (*action.UseRecord, error) {
	upd, err := setRecord(expression.UpdateBuilder{}, recordItem{Op: rec.Op, Action: a.CreatedAt.UnixMilli(), UseID: rec.UseID, Reason: rec.Reason,
		RequestedAt: ms(rec.RequestedAt), Key: rec.Write.Key, Fingerprint: rec.Write.Fingerprint, RequestID: rec.Write.RequestID,
		Outcome: string(rec.Outcome), Of: rec.Of, UsedAt: ms(rec.UsedAt), ReleasedAt: ms(rec.ReleasedAt), TTL: ttl,
		Holder: rec.Holder, HeldUntil: ms(rec.HeldUntil)})
	if err != nil {
		return nil, err
	}
	// A record of an earlier action of this id, or past its ttl, is gone.
	cond := expression.AttributeNotExists(expression.Name(attrID)).
		Or(expression.Name(rAction).NotEqual(expression.Value(a.CreatedAt.UnixMilli()))).
		Or(expression.Name(attrTTL).LessThan(expression.Value(now.Unix())))
	_, old, failed, err := st.exprWrite(ctx, recordKey(tenant.ItemKey(a.Tenant, a.ID), rec.Ref), upd, &cond, types.ReturnValueNone)
	if err != nil || !failed {
		return nil, err
	}
	return DecodeRecord(old)
}

// finishRecord stores the outcome of a keyed call its record did not have
// when it was written (a refusal, or a success found made): one write. A
// take's (holder set) lands only while that attempt holds the record and
// its use was never released: else another attempt took over, and the
// call answers unavailable (re-sent, it gets the key's answer).
func (st *Store) finishRecord(ctx context.Context, a *action.Action, ref, holder string, outcome action.Code, of string, usedAt, releasedAt time.Time) error {
	upd, err := setRecord(expression.UpdateBuilder{}, recordItem{Outcome: string(outcome), Of: of, UsedAt: ms(usedAt), ReleasedAt: ms(releasedAt)})
	if err != nil {
		return err
	}
	var cond *expression.ConditionBuilder
	if holder != "" {
		c := expression.Name(rHolder).Equal(expression.Value(holder)).
			And(expression.AttributeNotExists(expression.Name(rReleasedAt))).
			And(expression.AttributeNotExists(expression.Name(rOutcome)).Or(expression.Name(rOutcome).Equal(expression.Value(string(outcome)))))
		cond = &c
	}
	_, _, failed, err := st.exprWrite(ctx, recordKey(tenant.ItemKey(a.Tenant, a.ID), ref), upd, cond, types.ReturnValueNone)
	if err == nil && failed {
		err = fmt.Errorf("%w: a keyed take's attempt lost its record to another", ErrUnavailable)
	}
	return err
}

// hold puts the attempt me in charge of take r, unresolved (its use
// neither held nor released, no answer recorded): at once if it is me, or
// if the attempt that held it let go or its hold lapsed (it stopped); else
// another attempt is running, and the answer is in_progress until its hold
// ends. One conditional write when it takes over.
func (st *Store) hold(ctx context.Context, a *action.Action, r *action.UseRecord, me string, now time.Time) error {
	if r.Holder == me {
		return nil
	}
	if now.Before(r.HeldUntil) {
		return inProgress(r.HeldUntil)
	}
	until := now.Add(callPatience)
	upd := expression.Set(expression.Name(rHolder), expression.Value(me)).Set(expression.Name(rHeldUntil), expression.Value(ms(until)))
	cond := equalOrAbsent(rHolder, r.Holder).And(equalOrAbsent(rHeldUntil, ms(r.HeldUntil)))
	_, old, failed, err := st.exprWrite(ctx, recordKey(tenant.ItemKey(a.Tenant, a.ID), r.Ref), upd, &cond, types.ReturnValueNone)
	switch {
	case err != nil || !failed:
		return err
	case old == nil:
		return ErrUnavailable
	}
	now2, err := DecodeRecord(old)
	switch {
	case err != nil:
		return err
	case now2.Holder == me: // this write, re-sent by the SDK after it applied
		return nil
	}
	return inProgress(later(now2.HeldUntil, now.Add(time.Second)))
}

// letGo ends attempt me's hold on take ref after it failed (a dependency
// fault): the client's re-send may act at once, and another take of the
// useId may drop a forward it left (best effort).
func (st *Store) letGo(ctx context.Context, a *action.Action, ref, me string) {
	cond := expression.Name(rHolder).Equal(expression.Value(me))
	_, _, _, _ = st.exprWrite(ctx, recordKey(tenant.ItemKey(a.Tenant, a.ID), ref), expression.Remove(expression.Name(rHeldUntil)), &cond, types.ReturnValueNone)
}

// equalOrAbsent: attribute name is v, or absent when v is its zero value.
func equalOrAbsent[T comparable](name string, v T) expression.ConditionBuilder {
	var zero T
	if v == zero {
		return expression.AttributeNotExists(expression.Name(name))
	}
	return expression.Name(name).Equal(expression.Value(v))
}

// InProgressError refuses a keyed take re-sent while an earlier attempt of
// it runs: that attempt holds the take until Until (at the latest).
type InProgressError struct{ Until time.Time }

func (e *InProgressError) Error() string { return "store: an earlier attempt of this take is running" }

func inProgress(until time.Time) error { return &InProgressError{Until: until} }

// Take is a request to take one use of a multi-use action.
type Take struct {
	Tenant       string // whose action
	UseID        string
	Reason       string
	Write        action.Write // the call's key digest, fingerprint and request id
	Fingerprints []string     // the request's under every known key set
	KeyIDs       []string     // the key sets this server knows
	Now          time.Time
}

// Taken is a take's answer: the action (as read), the use and when it was
// taken; Write is the call that took it (for Idempotent-Replayed), and
// Replayed says the answer is an earlier one (this call's, or the use the
// useId holds).
type Taken struct {
	Action   *action.Action
	UseID    string
	UsedAt   time.Time
	Write    action.Write
	Replayed bool
}

// Take gives t.UseID one use of the action. It writes the call's record,
// then ONE conditional write on a gate takes the use: the gate is open and
// active, holds the useId nowhere, and has room. A useId is held at most
// once because its use is an entry named by its token, in its home gate
// or, when that is full, in the first gate with room after it (a
// releasable action's home gate then holds a forward to it). The same
// useId again, or the call re-sent, answers as its first take. Costs: 2
// writes (1 write unit each); a gate that is full costs one more write,
// then the gates after it are read (one BatchGetItem per 100) to find
// room, and a use written further from home than any before it one more
// write (see place); the first take of an action on this instance also
// reads the action.
func (st *Store) Take(ctx context.Context, id string, t Take) (_ *Taken, err error) {
	now, start := action.Millis(t.Now), time.Now()
	a, err := st.multiUse(ctx, t.Tenant, id, now, false)
	if err != nil {
		return nil, err
	}
	if !a.MultiUse() {
		return nil, action.ErrSingleUse
	}
	if a.KeyID != "" && !slices.Contains(t.KeyIDs, a.KeyID) {
		return nil, &action.UnknownKeyError{KeyID: a.KeyID}
	}
	keyed := t.Write.Key != ""
	closed := action.Closed(a, now)
	// A useId that holds a use keeps answering as its first take, the
	// action canceled or expired since (as a closed gate answers it): read
	// where it lives; else the refusal, from the item.
	var held *action.Entry
	searched := closed != nil && !isCode(closed, action.CodeNotActive)
	if searched {
		if held, err = st.findUse(ctx, a, action.UseToken(t.UseID), now); err != nil {
			return nil, err
		}
	}
	heldAnswer := func() *Taken { return &Taken{Action: a, UseID: t.UseID, UsedAt: held.At, Replayed: true} }
	if closed != nil && !keyed {
		if held != nil {
			return heldAnswer(), nil
		}
		return nil, closed // nothing to write
	}
	t.Write = named(t.Write)
	rec := &action.UseRecord{Ref: action.RefHash(action.UseRef(action.OpTake, t.Write)), Op: action.OpTake, UseID: t.UseID,
		Write: t.Write, Reason: t.Reason, RequestedAt: now}
	switch {
	case held != nil: // the key's answer for good: the use its useId holds
		rec.Outcome, rec.Of, rec.UsedAt = action.OutcomeOK, held.Ref, held.At
	case closed != nil:
		rec.Outcome = refusalCode(closed) // the key's answer, whatever the action is when it is sent again
	default:
		rec.Holder, rec.HeldUntil = t.Write.RequestID, now.Add(callPatience)
		// An attempt that fails on a dependency fault lets go of its take:
		// its re-send acts at once, and another take of the useId drops a
		// forward it left.
		defer func() {
			var running *InProgressError
			if err != nil && refusalCode(err) == "" && !errors.As(err, &running) {
				st.letGo(ctx, a, rec.Ref, rec.Holder)
			}
		}()
	}
	tok := action.UseToken(t.UseID)
	prior, err := st.putRecord(ctx, a, rec, st.ttlOf(a), now)
	if err != nil {
		return nil, err
	}
	if prior == nil && held != nil {
		return heldAnswer(), nil
	}
	if prior == nil && closed != nil {
		return nil, closed
	}
	if prior != nil {
		at := action.Attempt{Now: now, Key: t.Write.Key, Fingerprints: t.Fingerprints, RequestID: t.Write.RequestID}
		same, err := action.Judge(prior, t.UseID, at)
		if err != nil {
			return nil, withAction(err, a)
		}
		if !same {
			return nil, errors.New("store: a take's record is another call's") // only two calls of one name could
		}
		done, ans, err := st.resolveTake(ctx, a, prior, tok, now, held, searched)
		if done || err != nil {
			return ans, err
		}
		if err := st.hold(ctx, a, prior, t.Write.RequestID, now); err != nil {
			return nil, err
		}
	}
	// Stamped with the time its gate write goes out, not the request's
	// start: the reads and writes before it may have been slow.
	at := action.Millis(now.Add(time.Since(start)))
	p, err := st.place(ctx, a, tok, action.Entry{Ref: rec.Ref, At: at}, at)
	if err != nil {
		if code := refusalCode(err); keyed && code != "" {
			if ferr := st.finishRecord(ctx, a, rec.Ref, rec.Holder, code, "", time.Time{}, time.Time{}); ferr != nil {
				return nil, ferr
			}
		}
		return nil, err
	}
	ans := &Taken{Action: a, UseID: t.UseID, UsedAt: p.At, Write: t.Write}
	if p.Ref != rec.Ref {
		// The useId holds a use another call took: answered as that take.
		ans.Write, ans.Replayed = action.Write{}, true
		if keyed {
			if err := st.finishRecord(ctx, a, rec.Ref, rec.Holder, action.OutcomeOK, p.Ref, p.At, time.Time{}); err != nil {
				return nil, err
			}
		}
	}
	return ans, nil
}

// resolveTake answers a take call re-sent (its record was there): from the
// record when it has an outcome; else from the gate, when the call's use
// is held or was released since (held is the useId's use when the caller
// searched already). done is false when the call's gate write never
// landed: the caller then makes it (the same entry, so a write that lands
// twice is one use).
func (st *Store) resolveTake(ctx context.Context, a *action.Action, r *action.UseRecord, tok string, now time.Time, held *action.Entry, searched bool) (bool, *Taken, error) {
	ans := &Taken{Action: a, UseID: r.UseID, Write: r.Write, Replayed: true}
	switch r.Outcome {
	case action.OutcomeOK:
		ans.UsedAt = r.UsedAt
		return true, ans, nil
	case "":
	default:
		return true, nil, &ReplayedError{Err: action.Reject(r.Outcome, a)}
	}
	if !r.ReleasedAt.IsZero() {
		ans.UsedAt = r.UsedAt // its use was released since
		return true, ans, nil
	}
	e := held
	if !searched {
		var err error
		if e, err = st.findUse(ctx, a, tok, now); err != nil {
			return false, nil, err
		}
	}
	if e != nil && e.Ref == r.Ref {
		ans.UsedAt = e.At
		return true, ans, nil
	}
	// Not in its gate: a release stamps the take's record before the entry
	// leaves, so the record read again now says whether it was released
	// since the first read; if not, the call's gate write never landed.
	again, err := st.record(ctx, a, r.Ref)
	if err != nil || again == nil || again.ReleasedAt.IsZero() {
		return false, nil, err
	}
	ans.UsedAt = again.UsedAt
	return true, ans, nil
}

// ReplayedError is the refusal a keyed call got when it was first sent,
// answered again to its re-send.
type ReplayedError struct{ Err error }

func (e *ReplayedError) Error() string { return e.Err.Error() }
func (e *ReplayedError) Unwrap() error { return e.Err }

// named gives a call without a key or a request id (a caller of the store
// other than the API, which always has one) a request id of its own: the
// name of its record.
func named(w action.Write) action.Write {
	if w.Key == "" && w.RequestID == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		w.RequestID = "store-" + hex.EncodeToString(b)
	}
	return w
}

// withAction attaches the action to a refusal that has none.
func withAction(err error, a *action.Action) error {
	if r, ok := err.(*action.Rejection); ok && r.Action == nil {
		return action.Reject(r.Code, a)
	}
	return err
}

// ttlOf is the end of retention of an open action's records and gates.
func (st *Store) ttlOf(a *action.Action) int64 { return a.ExpiresAt.Add(st.retention).Unix() }

// place puts the useId's entry e in a gate and returns the entry that holds
// the useId's use (e, or the one another take of the useId wrote).
func (st *Store) place(ctx context.Context, a *action.Action, tok string, e action.Entry, now time.Time) (*action.Entry, error) {
	gates := action.Gates(a.MaxUses)
	home := action.HomeGate(tok, gates)
	p, g, err := st.takeAt(ctx, a, home, tok, e, now)
	if p != nil || err != nil {
		return st.orHeld(ctx, a, tok, now, p, g, err)
	}
	if a.Releasable {
		return st.placeForwarded(ctx, a, home, g, tok, e, now)
	}
	// The home gate is full. A gate of an action that is not releasable
	// never loses a use, so a gate once full stays full: the useId's use,
	// if it has one, is in the first gate along its probe sequence with
	// room or holding it, and so is the room for a new one. The gates are
	// read a few at first, more as they turn out full; gate 0 rides with
	// the first: once it says every gate is full (sealed), no use of a
	// useId homed here is past the home gate's reach, and nothing further
	// is read.
	sv := sealView{st: st, a: a, tok: tok, home: home, gates: gates, first: 1, reach: g.Reach, now: now}
	step := action.ProbeStep(tok, gates)
	for off, n := 1, 4; off < gates; off, n = off+n, min(n*2, batchGetMax) {
		if past, err := sv.before(ctx, off); past || err != nil {
			return nil, refusedOr(err, a)
		}
		idx := make([]int, 0, n)
		for k := off; k < min(off+n, gates); k++ {
			idx = append(idx, (home+k*step)%gates)
		}
		gs, err := sv.read(ctx, off, idx)
		if err != nil {
			return nil, err
		}
		for k, i := range idx {
			pos := off + k
			if sv.past(pos) {
				return nil, action.Reject(action.CodeNoUsesLeft, a)
			}
			for g := gs[k]; ; {
				if g != nil {
					if held, ok := g.Entries[tok]; ok {
						return &held, nil
					}
					if err := action.GateRefusal(a, g, now); err != nil {
						return st.orHeld(ctx, a, tok, now, nil, g, err)
					}
					if g.Full() {
						break
					}
				}
				p, g2, err := st.takeAt(ctx, a, i, tok, e, now)
				if p != nil && p.Ref == e.Ref && pos > sv.reach && sealable(gates) {
					st.raiseReach(ctx, a, home, pos)
				}
				if p != nil || err != nil {
					return st.orHeld(ctx, a, tok, now, p, g2, err)
				}
				g = g2
			}
		}
	}
	sv.allFull(ctx)
	return nil, action.Reject(action.CodeNoUsesLeft, a)
}

// refusedOr is err, or the action's no_uses_left when there is none.
func refusedOr(err error, a *action.Action) error {
	if err != nil {
		return err
	}
	return action.Reject(action.CodeNoUsesLeft, a)
}

// sealable: an action that is not releasable, of more than 5 gates, is
// sealed once sold out (a smaller one's first read covers every gate).
func sealable(gates int) bool { return gates > 1+4 }

// sealView follows, along one useId's probe order (from position first:
// 1 for a take, which wrote its home gate, 0 for a search), whether the
// action is sealed, and then its home gate's reach: gate 0 is read with
// the first gates, and, once it says sealed, the home gate again (its
// reach read after the seal's mark is the seal's; the one read before may
// be older).
type sealView struct {
	st                 *Store
	a                  *action.Action
	tok                string
	now                time.Time
	home, gates, first int
	reach              int // the home gate's, as last read
	sold, sealed       bool
}

// before reports, before the gates from probe position off are read,
// whether off lies past the sealed reach (nothing further to read).
func (v *sealView) before(ctx context.Context, off int) (bool, error) {
	if !v.sold || off <= v.reach {
		return false, nil
	}
	if !v.sealed {
		gs, err := v.st.probeGates(ctx, v.a, []int{v.home}, v.tok, v.now)
		if err != nil {
			return false, err
		}
		if err := v.reread(gs[0]); err != nil {
			return false, err
		}
	}
	return off > v.reach, nil
}

// read reads the gates idx (probe positions from off), with gate 0 on the
// first read and the home gate again on the next once gate 0 said sealed.
func (v *sealView) read(ctx context.Context, off int, idx []int) ([]*action.Gate, error) {
	keys := idx
	first, again := off == v.first && sealable(v.gates), v.sold && !v.sealed
	switch {
	case first:
		keys = append(slices.Clip(idx), 0)
	case again:
		keys = append(slices.Clip(idx), v.home)
	}
	gs, err := v.st.probeGates(ctx, v.a, keys, v.tok, v.now)
	if err != nil {
		return nil, err
	}
	switch {
	case first:
		v.sold = gs[len(idx)] != nil && gs[len(idx)].SoldOut
		if v.sold && v.first == 0 && gs[0] != nil {
			v.reach = gs[0].Reach // the home gate, read with gate 0
		}
	case again:
		if err := v.reread(gs[len(idx)]); err != nil {
			return nil, err
		}
	}
	return gs[:len(idx)], nil
}

func (v *sealView) reread(home *action.Gate) error {
	if home == nil {
		return ErrUnavailable // a sealed action's gate went (a ttl passed)
	}
	v.reach, v.sealed = home.Reach, true
	return nil
}

// past reports whether probe position pos lies past the sealed reach.
func (v *sealView) past(pos int) bool { return v.sealed && pos > v.reach }

// allFull is called when every gate along the probe order was read full:
// the action is sold out, sealed then unless it is already.
func (v *sealView) allFull(ctx context.Context) {
	if !v.sold && sealable(v.gates) {
		v.st.seal(ctx, v.a, v.now)
	}
}

// orHeld is what a take's write into gate g gave (p, err); but when g
// refused it as canceled or expired (this instance's copy of the action
// predates that) and the useId's use may lie past g (a coupon's gate
// filled by takes, or a forward for it), it is the use the useId holds, if
// any: a useId that holds a use answers as its first take.
func (st *Store) orHeld(ctx context.Context, a *action.Action, tok string, now time.Time, p *action.Entry, g *action.Gate, err error) (*action.Entry, error) {
	if code := refusalCode(err); g == nil || code != action.CodeCanceled && code != action.CodeExpired {
		return p, err
	}
	if _, fwd := g.Forwards[tok]; !fwd && (a.Releasable || g.Held == 0 || !g.Full()) {
		return nil, err // (a gate a cancel made holds nothing)
	}
	held, ferr := st.findUse(ctx, a, tok, now)
	switch {
	case ferr != nil:
		return nil, ferr
	case held != nil:
		return held, nil
	}
	return nil, err
}

// raiseReach records on the home gate of a useId whose use was just
// written at probe position pos that a use of a useId homed there lies
// that far (one conditional write, nothing when it already says so). Best
// effort: a take that stopped before it is found by the seal.
func (st *Store) raiseReach(ctx context.Context, a *action.Action, home, pos int) {
	cond := expression.Name(gAction).Equal(expression.Value(a.CreatedAt.UnixMilli())).
		And(expression.AttributeNotExists(expression.Name(gReach)).Or(expression.Name(gReach).LessThan(expression.Value(pos))))
	_, _, _, _ = st.gateWrite(ctx, tenant.ItemKey(a.Tenant, a.ID), home,
		expression.Set(expression.Name(gReach), expression.Value(pos)), cond, types.ReturnValueNone)
}

// sealReads is how many gates a seal reads at once (8 BatchGetItems), and
// sealFixes how many reaches one seal writes at most: an action whose
// takes left more unrecorded (written before gates kept a reach) is sealed
// over several takes.
const (
	sealReads = 8 * batchGetMax
	sealFixes = 1000
	sealLease = callPatience
)

// seal is run when every gate of a (not releasable) was found full: then no
// use is ever taken or given back again. It claims gate 0 for sealLease
// (one conditional write: none when the action is sealed already, or
// another take is sealing it), reads every gate, raises each home gate's
// reach to the furthest use of a useId homed there (where a take stopped
// before it raised it), then marks gate 0 sold out: from then on a take,
// or a search for a useId's use, reads no gate past the useId's home
// gate's reach. Best effort: a seal that stops (a dependency fault, a
// crash) is made by a take that finds the gates full after its claim
// lapsed.
func (st *Store) seal(ctx context.Context, a *action.Action, now time.Time) {
	itemKey := tenant.ItemKey(a.Tenant, a.ID)
	// The claim's lapse in ns, its sub-millisecond part random: a claim
	// already there with this value is this seal's own, whose answer was
	// lost and the SDK re-sent.
	until := now.Add(sealLease).Truncate(time.Millisecond).UnixNano() + mathrand.Int64N(int64(time.Millisecond))
	claim := expression.Name(gAction).Equal(expression.Value(a.CreatedAt.UnixMilli())).
		And(expression.AttributeNotExists(expression.Name(gSoldOut))).
		And(expression.AttributeNotExists(expression.Name(gSealing)).
			Or(expression.Name(gSealing).LessThan(expression.Value(now.UnixNano()))).
			Or(expression.Name(gSealing).Equal(expression.Value(until))))
	_, _, failed, err := st.exprWrite(ctx, gateKey(itemKey, 0),
		expression.Set(expression.Name(gSealing), expression.Value(until)), &claim, types.ReturnValueNone)
	if err != nil || failed {
		return
	}
	gates := action.Gates(a.MaxUses)
	furthest, recorded := make([]int, gates), make([]int, gates)
	for off := 0; off < gates; off += sealReads {
		idx := make([]int, 0, sealReads)
		for i := off; i < min(off+sealReads, gates); i++ {
			idx = append(idx, i)
		}
		gs, err := st.readGates(ctx, a, idx, now)
		if err != nil {
			return
		}
		for k, g := range gs {
			if g == nil || !g.Full() {
				return // not every gate is this action's and full (a ttl passed)
			}
			recorded[idx[k]] = g.Reach
			for tok := range g.Entries {
				h := action.HomeGate(tok, gates)
				furthest[h] = max(furthest[h], action.ProbePosition(tok, gates, idx[k]))
			}
		}
	}
	var fix []int
	for h := range gates {
		if recorded[h] < furthest[h] {
			fix = append(fix, h)
		}
	}
	done := len(fix) <= sealFixes
	fix = fix[:min(len(fix), sealFixes)]
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, h := range fix {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			st.raiseReach(ctx, a, h, furthest[h])
		})
	}
	wg.Wait()
	// Every reach raised read again: one that failed leaves the seal undone.
	for off := 0; off < len(fix); off += sealReads {
		part := fix[off:min(off+sealReads, len(fix))]
		gs, err := st.readGates(ctx, a, part, now)
		if err != nil {
			return
		}
		for k, g := range gs {
			if g == nil || g.Reach < furthest[part[k]] {
				return
			}
		}
	}
	mark := expression.Set(expression.Name(gSoldOut), expression.Value(now.UnixMilli()))
	if !done {
		mark = expression.Remove(expression.Name(gSealing)) // the next refused take seals on
	}
	mine := expression.Name(gAction).Equal(expression.Value(a.CreatedAt.UnixMilli())).
		And(expression.Name(gSealing).Equal(expression.Value(until))) // a seal that outlived its claim leaves it to the next
	_, _, _, _ = st.exprWrite(ctx, gateKey(itemKey, 0), mark, &mine, types.ReturnValueNone)
}

// takeAt writes the useId's entry into gate i with one conditional write,
// creating the gate (from the action's create-time fields) when no take
// wrote it yet. It returns the entry that holds the useId's use when it is
// in this gate, or else the gate as the write saw it (full, or forwarding
// the useId elsewhere); a closed, expired or pending gate is the refusal.
func (st *Store) takeAt(ctx context.Context, a *action.Action, i int, tok string, e action.Entry, now time.Time) (*action.Entry, *action.Gate, error) {
	itemKey := tenant.ItemKey(a.Tenant, a.ID)
	ctx, resent := countResends(ctx)
	for try := 0; ; try++ {
		if try == maxGateTries {
			return nil, nil, ErrUnavailable // the gate kept changing under us
		}
		upd := expression.Set(expression.Name(gEntry+tok), expression.Value(encodeEntry(e))).
			Set(expression.Name(gHeld), expression.Plus(expression.IfNotExists(expression.Name(gHeld), expression.Value(0)), expression.Value(1))).
			Set(expression.Name(gAction), expression.IfNotExists(expression.Name(gAction), expression.Value(a.CreatedAt.UnixMilli()))).
			Set(expression.Name(gCap), expression.IfNotExists(expression.Name(gCap), expression.Value(action.GateCap(a.MaxUses, i)))).
			Set(expression.Name(gActive), expression.IfNotExists(expression.Name(gActive), expression.Value(a.ActiveAt.UnixMilli()))).
			Set(expression.Name(gExpires), expression.IfNotExists(expression.Name(gExpires), expression.Value(a.ExpiresAt.UnixMilli()))).
			Set(expression.Name(attrTTL), expression.IfNotExists(expression.Name(attrTTL), expression.Value(st.ttlOf(a))))
		cond := st.gateOpen(a, now).
			And(expression.AttributeNotExists(expression.Name(gEntry + tok))).
			And(expression.AttributeNotExists(expression.Name(gForward + tok))).
			And(expression.Name(gHeld).LessThan(expression.Name(gCap)))
		if a.Releasable {
			upd = upd.Set(expression.Name(gClock), expression.Value(e.At.UnixMilli()))
			cond = cond.And(clockBefore(e.At))
		}
		// A gate nobody wrote yet is created by this write, if the action
		// is open and active by what the caller read of it.
		if action.Closed(a, now) == nil {
			cond = expression.AttributeNotExists(expression.Name(attrID)).Or(cond)
		}
		resent.Store(0)
		t0 := time.Now()
		_, old, failed, err := st.gateWrite(ctx, itemKey, i, upd, cond, types.ReturnValueNone)
		lead := min(time.Since(t0), time.Second)
		switch {
		case err != nil:
			return nil, nil, err
		case !failed:
			return &e, nil, nil
		case old == nil:
			if err := action.Closed(a, now); err != nil {
				return nil, nil, err
			}
			continue
		case !old.Live(a.CreatedAt, now):
			if old.CreatedAt.After(a.CreatedAt) || old.TTL >= now.Unix() {
				// A gate of a later action of this id: what we read of the
				// action is out of date.
				st.cache.drop(itemKey)
				return nil, nil, ErrUnavailable
			}
			// The gate of an earlier action of this id, past its ttl (the
			// table just has not removed it yet): replace it.
			if err := st.replaceStaleGate(ctx, a, i, old); err != nil {
				return nil, nil, err
			}
			continue
		}
		held, ok := old.Entries[tok]
		if a.Releasable && resent.Load() > 0 && held.Ref != e.Ref && !old.Clock.Before(e.At) {
			// The SDK sent this write again, and the gate carried its time
			// or a later one: it may have landed (its answer lost) and been
			// released since (the useId may even hold another take's use
			// now), which the release stamped on the take's record before it
			// freed the entry.
			rec, err := st.record(ctx, a, e.Ref)
			if err != nil {
				return nil, nil, err
			}
			if rec != nil && !rec.ReleasedAt.IsZero() && rec.UsedAt.Equal(e.At) {
				return &e, nil, nil
			}
		}
		if ok {
			return &held, nil, nil
		}
		if err := action.GateRefusal(a, old, now); err != nil {
			if old.Closed {
				err = st.finishCancel(ctx, a, old)
			}
			return nil, old, err
		}
		if _, ok := old.Forwards[tok]; ok || old.Full() {
			return nil, old, nil
		}
		if a.Releasable && !old.Clock.Before(e.At) {
			// A later write committed with a later time: stamped again, at
			// now and ahead of it by what the write took (as a release's
			// moved stamp is: just after the gate's clock, a take would
			// lose again and again to writers stamping with their now).
			e.At = after(old.Clock, action.Millis(time.Now().Add(lead)))
			now = e.At
			continue
		}
		// Room, no entry, open: it changed between the write and its
		// answer (a release); try again.
	}
}

// replaceStaleGate deletes gate i of an earlier action of this id (its
// ttl passed: the table just has not removed it yet), if it is still the
// one read.
func (st *Store) replaceStaleGate(ctx context.Context, a *action.Action, i int, old *action.Gate) error {
	e, err := expression.NewBuilder().WithCondition(
		expression.Name(gAction).Equal(expression.Value(n(old.CreatedAt.UnixMilli()))).
			And(expression.Name(attrTTL).Equal(expression.Value(n(old.TTL))))).Build()
	if err != nil {
		return err
	}
	_, err = st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &st.table, Key: key(gateKey(tenant.ItemKey(a.Tenant, a.ID), i)),
		ConditionExpression:       e.Condition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return classifyErr(err)
	}
	return nil
}

// maxGateTries bounds the writes one take or release makes to its gate
// when other writes keep changing it (a releasable action's gate is
// written in time order: a write stamped before the gate's last one is
// stamped again and retried).
const maxGateTries = 64

// after is the time to stamp a write to a gate that last carried clock:
// now, or just after clock when the caller's clock is behind.
func after(clock, now time.Time) time.Time {
	if now.After(clock) {
		return now
	}
	return clock.Add(time.Millisecond)
}

// gateOpen is the condition that gate of a is this action's, live, open,
// active and not expired at now.
func (st *Store) gateOpen(a *action.Action, now time.Time) expression.ConditionBuilder {
	return expression.Name(gAction).Equal(expression.Value(a.CreatedAt.UnixMilli())).
		And(expression.Name(attrTTL).GreaterThanEqual(expression.Value(now.Unix()))).
		And(expression.AttributeNotExists(expression.Name(gClosed))).
		And(expression.Name(gExpires).GreaterThan(expression.Value(now.UnixMilli()))).
		And(expression.Name(gActive).LessThanEqual(expression.Value(now.UnixMilli())))
}

// clockBefore: a releasable action's gate last carried an earlier time.
func clockBefore(at time.Time) expression.ConditionBuilder {
	return expression.AttributeNotExists(expression.Name(gClock)).
		Or(expression.Name(gClock).LessThan(expression.Value(at.UnixMilli())))
}

// findUse returns the entry holding the useId's use now, or nil: reads only.
func (st *Store) findUse(ctx context.Context, a *action.Action, tok string, now time.Time) (*action.Entry, error) {
	e, _, _, err := st.locate(ctx, a, tok, now)
	return e, err
}

// locate returns the entry holding the useId's use and the gate that holds
// it (as read: its state, its clock and that entry), or nil; and the
// forward the useId's home gate holds to that gate, when it followed one.
func (st *Store) locate(ctx context.Context, a *action.Action, tok string, now time.Time) (*action.Entry, *action.Gate, string, error) {
	gates := action.Gates(a.MaxUses)
	home, step := action.HomeGate(tok, gates), action.ProbeStep(tok, gates)
	sv := sealView{st: st, a: a, tok: tok, home: home, gates: gates, first: 0, reach: gates, now: now}
	// Read as a take reads after its home gate (4, then 8, 16, …), the home
	// gate with the first.
	for off, n := 0, 1+4; off < gates; off, n = off+n, min(off+n+3, batchGetMax) {
		if past, err := sv.before(ctx, off); past || err != nil {
			return nil, nil, "", err // past: no use of a useId homed there is further
		}
		idx := make([]int, 0, n)
		for k := off; k < min(off+n, gates); k++ {
			idx = append(idx, (home+k*step)%gates)
		}
		var gs []*action.Gate
		var err error
		if a.Releasable {
			idx = idx[:1] // its home gate holds it, or says where
			gs, err = st.probeGates(ctx, a, idx, tok, now)
		} else {
			gs, err = sv.read(ctx, off, idx)
		}
		if err != nil {
			return nil, nil, "", err
		}
		for k, g := range gs {
			if sv.past(off + k) {
				return nil, nil, "", nil
			}
			switch {
			case g == nil:
				return nil, nil, "", nil // a gate nothing was written to: the search ends here
			case a.Releasable:
				if e, ok := g.Entries[tok]; ok {
					return &e, g, "", nil
				}
				f, ok := g.Forwards[tok]
				if !ok {
					return nil, nil, "", nil
				}
				dg, err := st.probeGates(ctx, a, []int{f.Gate}, tok, now)
				if err != nil || dg[0] == nil {
					return nil, nil, "", err
				}
				if e, ok := dg[0].Entries[tok]; ok {
					return &e, dg[0], forward(f), nil
				}
				return nil, nil, "", nil
			}
			if e, ok := g.Entries[tok]; ok {
				return &e, g, "", nil
			}
			if !g.Full() {
				return nil, nil, "", nil
			}
		}
		if a.Releasable {
			return nil, nil, "", nil
		}
	}
	sv.allFull(ctx)
	return nil, nil, "", nil
}

// placeForwarded takes a use of a releasable action whose home gate hg is
// full (or forwards the useId): the home gate records a forward to the
// first gate after it with room (so the useId is still held at most once,
// and its home gate says where), then that gate takes the entry. Three
// writes instead of two; without room anywhere, no_uses_left.
func (st *Store) placeForwarded(ctx context.Context, a *action.Action, home int, hg *action.Gate, tok string, e action.Entry, now time.Time) (*action.Entry, error) {
	itemKey := tenant.ItemKey(a.Tenant, a.ID)
	reread := func() error {
		gs, err := st.probeGates(ctx, a, []int{home}, tok, now)
		if err == nil && gs[0] == nil {
			err = ErrUnavailable
		}
		if err == nil {
			hg = gs[0]
		}
		return err
	}
	// enter takes the use in gate d, which the home gate's forward fwd
	// names; done is false when d filled meanwhile (the forward dropped).
	enter := func(d int, fwd string) (*action.Entry, bool, error) {
		p, _, err := st.takeAt(ctx, a, d, tok, e, now)
		switch {
		case p != nil && p.Ref == e.Ref:
			return p, true, nil
		case err != nil && refusalCode(err) == "":
			// The entry may have landed, its answer lost: the forward stays
			// and says where (dropped by the next take of the useId if the
			// entry is not there and this take let go).
			return nil, true, err
		}
		st.dropForward(ctx, a, home, tok, fwd, time.Time{})
		if p != nil || err != nil {
			return p, true, err
		}
		return nil, false, reread()
	}
	for try := 0; try < maxGateTries; try++ {
		if held, ok := hg.Entries[tok]; ok {
			return &held, nil
		}
		if f, ok := hg.Forwards[tok]; ok {
			// Held in gate f.Gate, or a take of the useId is between its
			// two writes (for a while), or one stopped there, or a release
			// freed it there and failed to drop the forward.
			dg, err := st.probeGates(ctx, a, []int{f.Gate}, tok, now)
			if err != nil {
				return nil, err
			}
			if dg[0] != nil {
				if held, ok := dg[0].Entries[tok]; ok {
					return &held, nil
				}
			}
			if f.Ref == e.Ref {
				// This take's own (its write landed, its answer lost; or an
				// earlier attempt of this keyed take wrote it and let go). It
				// is written again first, so that another take of the useId
				// that saw it left behind no longer drops it: one of the two
				// writes wins.
				fresh := forward(action.Forward{Gate: f.Gate, At: after(f.At, now), Ref: f.Ref})
				fw := expression.Name(gForward + tok)
				_, old, failed, err := st.gateWrite(ctx, itemKey, home, expression.Set(fw, expression.Value(fresh)), fw.Equal(expression.Value(forward(f))), types.ReturnValueNone)
				switch {
				case err != nil:
					return nil, err
				case failed && old == nil:
					return nil, ErrUnavailable
				case failed:
					hg = old
					continue
				}
				if p, done, err := enter(f.Gate, fresh); done || err != nil {
					return p, err
				}
				continue
			}
			var took *action.UseRecord
			if f.Ref != "" {
				if took, err = st.record(ctx, a, f.Ref); err != nil {
					return nil, err
				}
			}
			switch {
			case took != nil && !took.ReleasedAt.IsZero():
				st.dropForward(ctx, a, home, tok, forward(f), took.ReleasedAt)
			case took != nil && took.Holder != "" && !now.Before(took.HeldUntil):
				// Its take stopped (it failed and let go, or its hold
				// lapsed) without its entry: the forward leads nowhere.
				st.dropForward(ctx, a, home, tok, forward(f), time.Time{})
			case now.Sub(f.At) < callPatience && time.Since(f.At) < callPatience:
				if err := backoff.Sleep(ctx, 20*time.Millisecond); err != nil {
					return nil, err
				}
			default:
				st.dropForward(ctx, a, home, tok, forward(f), time.Time{})
			}
			if err := reread(); err != nil {
				return nil, err
			}
			continue
		}
		if !hg.Full() {
			p, g, err := st.takeAt(ctx, a, home, tok, e, now)
			if p != nil || err != nil {
				return p, err
			}
			hg = g
			continue
		}
		d, err := st.roomAfter(ctx, a, home, tok, now)
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, action.Reject(action.CodeNoUsesLeft, a)
		}
		if !hg.Clock.Before(e.At) {
			e.At = after(hg.Clock, e.At)
			now = e.At
		}
		fwd := forward(action.Forward{Gate: d, At: e.At, Ref: e.Ref})
		f := expression.Name(gForward + tok)
		upd := expression.Set(f, expression.Value(fwd)).Set(expression.Name(gClock), expression.Value(e.At.UnixMilli()))
		cond := st.gateOpen(a, now).And(expression.AttributeNotExists(expression.Name(gEntry + tok))).
			And(expression.AttributeNotExists(f)).And(clockBefore(e.At))
		_, old, failed, err := st.gateWrite(ctx, itemKey, home, upd, cond, types.ReturnValueNone)
		switch {
		case err != nil:
			return nil, err
		case failed && old == nil:
			return nil, ErrUnavailable
		case failed:
			if err := action.GateRefusal(a, old, now); err != nil {
				return nil, err
			}
			hg = old
			continue
		}
		if p, done, err := enter(d, fwd); done || err != nil {
			return p, err
		}
	}
	return nil, ErrUnavailable
}

// roomAfter returns the first gate after home with room (reads: a few
// gates at first, more as they turn out full), or -1.
func (st *Store) roomAfter(ctx context.Context, a *action.Action, home int, tok string, now time.Time) (int, error) {
	gates := action.Gates(a.MaxUses)
	step := action.ProbeStep(tok, gates)
	for off, n := 1, 4; off < gates; off, n = off+n, min(n*2, batchGetMax) {
		idx := make([]int, 0, n)
		for k := off; k < min(off+n, gates); k++ {
			idx = append(idx, (home+k*step)%gates)
		}
		gs, err := st.probeGates(ctx, a, idx, tok, now)
		if err != nil {
			return 0, err
		}
		for k, g := range gs {
			if g == nil || !g.Full() && !g.Closed {
				return idx[k], nil
			}
		}
	}
	return -1, nil
}

// dropForward removes the useId's forward from its home gate when it is
// still val (best effort: a forward left behind is dropped by the next
// take of the useId: at once once its use was released, else once stale).
// After a release (at, its time), the home gate's clock moves to at, so
// that a take of the useId after the release, in whatever gate, is stamped
// after it.
func (st *Store) dropForward(ctx context.Context, a *action.Action, home int, tok, val string, at time.Time) {
	itemKey := tenant.ItemKey(a.Tenant, a.ID)
	f := expression.Name(gForward + tok)
	if !at.IsZero() {
		upd := expression.Remove(f).Set(expression.Name(gClock), expression.Value(at.UnixMilli()))
		_, old, failed, err := st.gateWrite(ctx, itemKey, home, upd, f.Equal(expression.Value(val)).And(clockBefore(at)), types.ReturnValueNone)
		if err != nil || !failed || old == nil {
			return
		}
		if _, ok := old.Forwards[tok]; !ok {
			return
		}
	}
	_, _, _, _ = st.gateWrite(ctx, itemKey, home, expression.Remove(f), f.Equal(expression.Value(val)), types.ReturnValueNone)
}

// Release is a request to give back one use of a releasable action.
type Release struct {
	Tenant       string
	UseID        string
	Write        action.Write
	Fingerprints []string
	Now          time.Time
}

// Released answers a release: the use given back, when it was taken and
// when released; Replayed says the answer is the call's earlier one.
type Released struct {
	Action     *action.Action
	UseID      string
	UsedAt     time.Time
	ReleasedAt time.Time
	Replayed   bool
}

// Release frees r.UseID's use. It reads where the use is (the gate that
// holds the useId's entry, which names the take holding it), stamps the
// release on that take's record, then frees the entry with ONE conditional
// write on the gate. The stamp comes first, so an entry never leaves its
// gate before its take's record says so: a take re-sent with its key then
// always finds out that its use was released, and never takes another (a
// release that stopped between a gate write made first and its stamp left
// a take that looked as if it had never landed). A keyed call records which
// take it releases before the stamp, so the same key re-sent, even after
// the useId took a use again, replays instead of freeing that use. Costs:
// a read and 2 writes (2 write units); a keyed call 3 writes; one more
// gate write when later writes beat the release to its gate. A useId that
// holds no use answers use_not_found.
func (st *Store) Release(ctx context.Context, id string, r Release) (*Released, error) {
	now, start := action.Millis(r.Now), time.Now()
	a, err := st.multiUse(ctx, r.Tenant, id, now, false)
	if err != nil {
		return nil, err
	}
	tok := action.UseToken(r.UseID)
	keyed := r.Write.Key != ""
	if !a.Releasable && !keyed {
		return nil, action.Reject(action.CodeNotReleasable, a)
	}
	r.Write = named(r.Write)
	ref := action.RefHash(action.UseRef(action.OpRelease, r.Write))
	var e *action.Entry
	var g *action.Gate
	var fwd string
	if a.Releasable {
		if e, g, fwd, err = st.locate(ctx, a, tok, now); err != nil {
			return nil, err
		}
	}
	resumed := false
	if keyed {
		rec := &action.UseRecord{Ref: ref, Op: action.OpRelease, UseID: r.UseID, Write: r.Write, RequestedAt: now}
		switch {
		case !a.Releasable:
			rec.Outcome = action.CodeNotReleasable
		case e == nil:
			rec.Outcome = action.CodeUseNotFound
		default:
			rec.Of, rec.UsedAt = e.Ref, e.At
		}
		prior, err := st.putRecord(ctx, a, rec, st.ttlOf(a), now)
		if err != nil {
			return nil, err
		}
		if prior != nil {
			at := action.Attempt{Now: now, Key: r.Write.Key, Fingerprints: r.Fingerprints, RequestID: r.Write.RequestID}
			if _, err := action.Judge(prior, r.UseID, at); err != nil {
				return nil, withAction(err, a)
			}
			switch prior.Outcome {
			case "":
			case action.OutcomeOK: // a record of a release before stamps came first
				return &Released{Action: a, UseID: prior.UseID, UsedAt: prior.UsedAt, ReleasedAt: prior.ReleasedAt, Replayed: true}, nil
			default:
				return nil, &ReplayedError{Err: action.Reject(prior.Outcome, a)}
			}
			want := action.Entry{Ref: prior.Of, At: prior.UsedAt}
			if e == nil || *e != want {
				// The use it released has left its gate: freed by this call,
				// or by another first (this call found it made).
				at, err := st.releasedAt(ctx, a, want.Ref, now)
				if err != nil {
					return nil, err
				}
				return &Released{Action: a, UseID: r.UseID, UsedAt: want.At, ReleasedAt: at, Replayed: true}, nil
			}
			resumed = true
		}
	}
	switch {
	case !a.Releasable:
		return nil, action.Reject(action.CodeNotReleasable, a)
	case e == nil:
		return nil, action.Reject(action.CodeUseNotFound, a)
	}
	var at time.Time
	err = action.GateRefusal(a, g, now) // a release needs the action open and not expired, however early its activeAt
	if err == nil || isCode(err, action.CodeNotActive) {
		at, err = st.releaseTake(ctx, a, tok, *e, g, ref, r.Write, now, start)
	}
	var freed *freedError
	if fwd != "" && (err == nil || errors.As(err, &freed)) {
		// Freed from the gate its home gate forwarded it to: the forward goes.
		dropAt := at
		if freed != nil {
			dropAt = freed.At
		}
		st.dropForward(ctx, a, action.HomeGate(tok, action.Gates(a.MaxUses)), tok, fwd, dropAt)
	}
	switch {
	case keyed && errors.As(err, &freed):
		// Another call released it first: this call found it made.
		return &Released{Action: a, UseID: r.UseID, UsedAt: e.At, ReleasedAt: freed.At, Replayed: resumed}, nil
	case keyed && refusalCode(err) != "":
		// Refused (canceled, expired): the key's answer for good.
		if ferr := st.finishRecord(ctx, a, ref, "", refusalCode(err), "", time.Time{}, time.Time{}); ferr != nil {
			return nil, ferr
		}
		return nil, err
	case err != nil:
		return nil, err
	}
	return &Released{Action: a, UseID: r.UseID, UsedAt: e.At, ReleasedAt: at}, nil
}

// isCode reports whether err is a refusal with code c.
func isCode(err error, c action.Code) bool {
	var r *action.Rejection
	return errors.As(err, &r) && r.Code == c
}

// refusalCode is the code of a refusal a call's record keeps as its
// answer ("" for any other error: unavailable, internal, invalid).
func refusalCode(err error) action.Code {
	var r *action.Rejection
	if errors.As(err, &r) && r.Code != action.CodeInternal {
		return r.Code
	}
	return ""
}

// releasedAt is when the use of take ref was released, from the stamp on
// its record (now when it has none: a release by a version that stamped
// after its gate write).
func (st *Store) releasedAt(ctx context.Context, a *action.Action, ref string, now time.Time) (time.Time, error) {
	take, err := st.record(ctx, a, ref)
	if err != nil || take == nil || take.ReleasedAt.IsZero() {
		return now, err
	}
	return take.ReleasedAt, nil
}

// releaseTake releases the use whose entry want is held in gate g and
// returns its release time. It stamps the release (call ref, write w) on
// the take's record, then frees the entry with one conditional write on the
// gate at the stamp's time. A record stamped by another call is that
// call's release: this call finishes it (a call may have stopped between
// its two writes; both writing at once is one release, at one time): its
// own gate write freeing the entry answers as its release, at that time;
// the entry freed by the other's write, it found it made (*freedError).
// The gate write moves the gate's clock to the stamp; when the clock is
// already past it (writes stamped later committed first), a second write
// frees the entry at the stamp and leaves the clock ahead of it, so a take
// after the release is stamped after it either way. A stamp older than
// staleStamp (its call stopped, or was slow) is first fenced off, the
// gate's clock carried past it so that no write at its time lands any
// more, and moved to now (conditional on the stamp it moves): a release is
// never stamped long before it committed. Refusals: use_not_found (the
// entry left its gate), canceled, expired.
func (st *Store) releaseTake(ctx context.Context, a *action.Action, tok string, want action.Entry, g *action.Gate, ref string, w action.Write, now, start time.Time) (time.Time, error) {
	itemKey := tenant.ItemKey(a.Tenant, a.ID)
	// clock is the time now: the request's time (now, read at start) and
	// what passed since (the reads and writes before the stamp included).
	clock := func() time.Time { return action.Millis(now.Add(time.Since(start))) }
	// restamp writes the release's stamp at (over was, the stamp before;
	// nil for the first), and keeps what the write took as lead: how far
	// ahead of now a moved stamp goes.
	var s *action.UseRecord
	var lead time.Duration
	restamp := func(at time.Time, was *action.UseRecord) (err error) {
		t0 := time.Now()
		s, err = st.stamp(ctx, a, want, at, ref, w, was)
		lead = min(time.Since(t0), time.Second)
		return err
	}
	if err := restamp(after(g.Clock, clock()), nil); err != nil {
		return time.Time{}, err
	}
	// done answers with stamp s once the entry left its gate: this call's
	// release, or another's.
	done := func(s *action.UseRecord) (time.Time, error) {
		if s.ReleaseRef == ref {
			return s.ReleasedAt, nil
		}
		f := &freedError{Rejection: action.Reject(action.CodeUseNotFound, a), At: s.ReleasedAt}
		if f.At.IsZero() {
			f.At = clock() // freed by a version that stamped after its gate write, not yet stamped
		}
		return time.Time{}, f
	}
	entry := expression.Name(gEntry + tok)
	// Open and not expired, however early its activeAt, and want still held.
	// The release commits at at: the action must not have expired by then.
	// Ahead of the gate's clock, it moves the clock to at; behind it (a
	// later write committed first), it leaves the clock where it is, and
	// only while the clock is less than staleStamp past at (a fence moves
	// it further: no write at a fenced stamp lands).
	held := func(at time.Time, behind bool) expression.ConditionBuilder {
		c := expression.Name(gAction).Equal(expression.Value(a.CreatedAt.UnixMilli())).
			And(expression.Name(attrTTL).GreaterThanEqual(expression.Value(now.Unix()))).
			And(expression.AttributeNotExists(expression.Name(gClosed))).
			And(expression.Name(gExpires).GreaterThan(expression.Value(at.UnixMilli()))).
			And(entry.Equal(expression.Value(encodeEntry(want))))
		if behind {
			return c.And(expression.Name(gClock).Between(expression.Value(at.UnixMilli()), expression.Value(at.Add(staleStamp).UnixMilli()-1)))
		}
		return c.And(clockBefore(at))
	}
	behind := false
	for try := 0; try < maxGateTries; try++ {
		at := s.ReleasedAt
		upd := expression.Remove(entry).
			Set(expression.Name(gHeld), expression.Name(gHeld).Minus(expression.Value(1))).
			Set(expression.Name(gLast), expression.Value(encodeLast(lastRelease{Token: tok, Entry: action.Entry{Ref: want.Ref, At: at}})))
		if !behind {
			upd = upd.Set(expression.Name(gClock), expression.Value(at.UnixMilli()))
		}
		if fence := clock(); at.Before(fence.Add(-staleStamp)) {
			// The fence: the gate's clock now, or nothing at the stamp's
			// time may land (it would be a release stamped in the past).
			at, upd, behind = fence, expression.Set(expression.Name(gClock), expression.Value(fence.UnixMilli())), false
		}
		_, old, failed, err := st.gateWrite(ctx, itemKey, g.Index, upd, held(at, behind), types.ReturnValueNone)
		switch {
		case err != nil:
			return time.Time{}, err
		case !failed && at.Equal(s.ReleasedAt):
			// This write freed it: this call's release, or one another call
			// stamped and stopped before (this call finished it).
			return s.ReleasedAt, nil
		case !failed: // fenced
			old = &action.Gate{Clock: at}
		case old == nil || !old.Live(a.CreatedAt, now):
			return time.Time{}, action.Reject(action.CodeUseNotFound, a)
		case old.Entries[tok] != want:
			// Left its gate since: by this call (its write re-sent by the
			// SDK after it applied), or by another finishing the stamp.
			if s, err = st.record(ctx, a, want.Ref); err != nil || s == nil {
				return time.Time{}, errors.Join(err, ErrUnavailable)
			}
			return done(s)
		default:
			// At the time the write carried: past expiresAt, expired.
			if err := action.GateRefusal(a, old, later(now, at)); err != nil && !isCode(err, action.CodeNotActive) {
				if old.Closed {
					err = st.finishCancel(ctx, a, old)
				}
				return time.Time{}, err
			}
			if at.Equal(s.ReleasedAt) && !old.Clock.Before(at) && old.Clock.Before(at.Add(staleStamp)) {
				// Later writes committed first: the entry is freed at the
				// stamp all the same, the clock left ahead of it (so the
				// next take of the useId is stamped after it). Moving the
				// stamp past the clock instead, a release lost again and
				// again to takes on a busy gate (64 writes, then 503).
				behind = true
				continue
			}
		}
		// Fenced (or the gate's clock already past the fence, or a
		// second past the stamp): the stamp moves to now (or just after
		// the gate's clock), ahead of now by what a move takes.
		if err := restamp(after(old.Clock, clock().Add(lead)), s); err != nil {
			return time.Time{}, err
		}
		behind = false
	}
	return time.Time{}, ErrUnavailable
}

// staleStamp is how old a release's stamp may be when its gate write
// lands: a stamp this old was left by a call that stopped between its two
// writes (or that was slow), and is fenced off and moved to now.
const staleStamp = time.Second

// freedError is use_not_found for a use another call released first, at At.
type freedError struct {
	*action.Rejection
	At time.Time
}

func (e *freedError) Unwrap() error { return e.Rejection }

// stamp writes on the record of the take that holds entry e that call ref
// (write w) releases its use at at, unless another call's stamp is there;
// with was set, it moves the stamp was to at instead (whoever's it is), if
// it is still there. It returns the stamp on the record after the write:
// its time and its call (ReleasedAt, ReleaseRef).
func (st *Store) stamp(ctx context.Context, a *action.Action, e action.Entry, at time.Time, ref string, w action.Write, was *action.UseRecord) (*action.UseRecord, error) {
	ra, rx := expression.Name(rReleasedAt), expression.Name(rRelRef)
	it := recordItem{UsedAt: ms(e.At), ReleasedAt: ms(at), RelKey: w.Key, RelFP: w.Fingerprint, RelReq: w.RequestID, RelRef: ref}
	// A first stamp, or this call's re-sent by the SDK.
	cond := expression.AttributeExists(expression.Name(rUseID)).
		And(expression.AttributeNotExists(ra).Or(rx.Equal(expression.Value(ref)).And(ra.Equal(expression.Value(ms(at))))))
	if was != nil {
		it = recordItem{ReleasedAt: ms(at)}
		cond = rx.Equal(expression.Value(was.ReleaseRef)).And(ra.Equal(expression.Value(ms(was.ReleasedAt)))).
			And(expression.Name(rUsedAt).Equal(expression.Value(ms(e.At))))
	}
	upd, err := setRecord(expression.UpdateBuilder{}, it)
	if err != nil {
		return nil, err
	}
	_, old, failed, err := st.exprWrite(ctx, recordKey(tenant.ItemKey(a.Tenant, a.ID), e.Ref), upd, &cond, types.ReturnValueNone)
	switch {
	case err != nil:
		return nil, err
	case !failed && was != nil:
		return &action.UseRecord{ReleasedAt: at, ReleaseRef: was.ReleaseRef}, nil
	case !failed:
		return &action.UseRecord{ReleasedAt: at, ReleaseRef: ref}, nil
	case old == nil:
		return nil, errors.New("store: the record of a held use's take is missing")
	}
	return DecodeRecord(old)
}

// record reads one use record of a (nil when there is none).
func (st *Store) record(ctx context.Context, a *action.Action, ref string) (*action.UseRecord, error) {
	items, err := st.readItems(ctx, []string{recordKey(tenant.ItemKey(a.Tenant, a.ID), ref)}, nil)
	if err != nil || items[0] == nil {
		return nil, err
	}
	return DecodeRecord(items[0])
}

// finishCancel completes a cancel that closed gate g and stopped before
// its own write (best effort), and returns the refusal canceled with the
// action as the cancel left it (its canceledAt), as a replay renders it.
func (st *Store) finishCancel(ctx context.Context, a *action.Action, g *action.Gate) error {
	cur, err := st.Get(ctx, a.Tenant, a.ID)
	if err != nil || !cur.CreatedAt.Equal(a.CreatedAt) {
		return action.Reject(action.CodeCanceled, a)
	}
	if !cur.Finished() {
		info, err := st.gateCancel(ctx, a, g.Index)
		if err != nil || info == nil {
			return action.Reject(action.CodeCanceled, a)
		}
		if done, err := st.Cancel(ctx, a.ID, *info); err == nil {
			cur = done
		} else if cur, err = st.Get(ctx, a.Tenant, a.ID); err != nil {
			return action.Reject(action.CodeCanceled, a)
		}
	}
	if cur.CanceledAt.IsZero() {
		return action.Reject(action.CodeCanceled, a)
	}
	return action.Reject(action.CodeCanceled, cur)
}

// gateCancel reads the cancel that closed gate i.
func (st *Store) gateCancel(ctx context.Context, a *action.Action, i int) (*Cancel, error) {
	items, err := st.readItems(ctx, []string{gateKey(tenant.ItemKey(a.Tenant, a.ID), i)}, []string{gClosed, gCancel})
	if err != nil || items[0] == nil {
		return nil, err
	}
	m, ok := items[0][gCancel].(*types.AttributeValueMemberM)
	if !ok {
		return nil, nil
	}
	d := dynamoitem.Decoder{Item: m.Value}
	c := dynamoitem.Decoder{Item: items[0]}
	return &Cancel{Tenant: a.Tenant, Reason: d.Str("r"), Write: action.Write{Key: d.Str("k"), Fingerprint: d.Str("f"), RequestID: d.Str("q")},
		Now: time.UnixMilli(c.Num(gClosed)).UTC()}, nil
}

// actionCache keeps what a multi-use action's create wrote (all that takes
// and releases need of its item) for cacheTTL: its gates decide what
// happens, so a copy a minute old answers as well as a read.
type actionCache struct {
	mu sync.Mutex
	m  map[string]cachedAction
}

type cachedAction struct {
	a  *action.Action
	at time.Time
}

const (
	cacheTTL = time.Minute
	cacheMax = 10_000
)

func (c *actionCache) get(key string, now time.Time) *action.Action {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok && now.Sub(e.at) < cacheTTL && now.Sub(e.at) >= -time.Second {
		cp := *e.a
		return &cp
	}
	return nil
}

func (c *actionCache) put(key string, a *action.Action, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= cacheMax {
		c.m = map[string]cachedAction{}
	}
	cp := *a
	c.m[key] = cachedAction{a: &cp, at: now}
}

func (c *actionCache) drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// multiUse returns a tenant's action for a take, a release or a listing:
// from the cache unless fresh, else read (and a legacy item migrated to
// gates first). A finished action read here is answered without a write.
func (st *Store) multiUse(ctx context.Context, tenantName, id string, now time.Time, fresh bool) (*action.Action, error) {
	itemKey := tenant.ItemKey(tenantName, id)
	if !fresh {
		if a := st.cache.get(itemKey, now); a != nil {
			return a, nil
		}
	}
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.table, Key: key(itemKey), ConsistentRead: aws.Bool(true)})
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
	if isLegacy(out.Item) {
		if a, err = st.migrate(ctx, out.Item, a, now); err != nil {
			return nil, err
		}
	}
	if a.MultiUse() {
		st.cache.put(itemKey, a, now)
	}
	return a, nil
}
