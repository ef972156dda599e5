package store

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/exactonce/exactonce/internal/dynamoitem"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/tenant"
)

// A multi-use action's capacity lives in gates (action.Gates of them), each
// its own item: ug#<i>#<item key>. A held use is an entry of one gate, its
// own attribute e:<token of the useId> (the take's record name and usedAt),
// and h counts them: one write adds an entry and counts it only if the
// entry is not there, so a write applied twice (its answer lost, the SDK
// re-sending it) is one use; and the first take into a gate creates it in
// the same write.
// What a take or release call did is a record: ur#<ref hash>#<item key>.
// '#' is outside the action id alphabet, so neither is ever an action.
const (
	// GatePrefix starts a gate's partition key (the stream's filter lets
	// the gates' records through to the publisher).
	GatePrefix   = "ug#"
	recordPrefix = "ur#"

	gAction  = "a"   // the action's createdAt (ms): the gate's action
	gCap     = "n"   // capacity
	gActive  = "act" // activeAt (ms)
	gExpires = "exp" // expiresAt (ms)
	gHeld    = "h"   // how many entries
	gEntry   = "e:"  // + token: an entry (binary: 9-byte record name, 6-byte usedAt ms)
	gForward = "f:"  // + token: "gate index/ms" (releasable: the useId's use is held in another gate)
	gClosed  = "c"   // the closing cancel's time (ms): set before the action's canceledAt
	gCancel  = "cx"  // the closing cancel's reason, key, fingerprint and request id
	gClock   = "t"   // releasable: the last time a write carried (ms)
	gLast    = "lr"  // the last release's token, record and time (binary), for its event
	gReach   = "r"   // not releasable: the furthest probe position of a use of a useId homed here (absent: 0)
	gSoldOut = "so"  // gate 0, not releasable: every gate found full, and every reach made exact (ms)
	gSealing = "sx"  // gate 0, not releasable: a take is sealing the action until then (ns)
)

// IsUseItem reports whether a partition key is a gate's or a use record's.
func IsUseItem(pk string) bool {
	return strings.HasPrefix(pk, GatePrefix) || strings.HasPrefix(pk, recordPrefix)
}

// IsGateItem reports whether a partition key is a gate's, and whose.
func IsGateItem(pk string) (itemKey string, index int, ok bool) {
	rest, ok := strings.CutPrefix(pk, GatePrefix)
	if !ok {
		return "", 0, false
	}
	i, key, ok := strings.Cut(rest, "#")
	n, err := strconv.Atoi(i)
	if !ok || err != nil || n < 0 {
		return "", 0, false
	}
	return key, n, true
}

func gateKey(itemKey string, i int) string { return GatePrefix + strconv.Itoa(i) + "#" + itemKey }

func recordKey(itemKey, ref string) string { return recordPrefix + ref + "#" + itemKey }

// encodeEntry packs an entry: the 9 bytes of its record name, then usedAt
// in milliseconds (6 bytes, big endian).
func encodeEntry(e action.Entry) []byte {
	ref, _ := base64.RawURLEncoding.DecodeString(e.Ref)
	b := make([]byte, 15)
	copy(b, ref)
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(e.At.UnixMilli()))
	copy(b[9:], ms[2:])
	return b
}

func decodeEntry(b []byte) (action.Entry, bool) {
	if len(b) != 15 {
		return action.Entry{}, false
	}
	var ms [8]byte
	copy(ms[2:], b[9:])
	return action.Entry{Ref: base64.RawURLEncoding.EncodeToString(b[:9]), At: time.UnixMilli(int64(binary.BigEndian.Uint64(ms[:]))).UTC()}, true
}

// lastRelease is a gate's record of its latest release (for the event the
// stream makes of it): the token, the released take's record, the time.
type lastRelease struct {
	Token string
	Entry action.Entry // Ref of the released take; At is releasedAt
}

func encodeLast(l lastRelease) []byte {
	tok, _ := base64.RawURLEncoding.DecodeString(l.Token)
	return append(tok, encodeEntry(l.Entry)...)
}

func decodeLast(b []byte) (lastRelease, bool) {
	if len(b) != 8+15 {
		return lastRelease{}, false
	}
	e, ok := decodeEntry(b[8:])
	return lastRelease{Token: base64.RawURLEncoding.EncodeToString(b[:8]), Entry: e}, ok
}

// DecodeGate reads a gate item (from a read, a write's old item or a
// stream image). A malformed gate is an error.
func DecodeGate(item map[string]types.AttributeValue) (*action.Gate, error) {
	d := dynamoitem.Decoder{Item: item}
	_, idx, ok := IsGateItem(d.Str(attrID))
	if !ok {
		d.Fail(attrID)
	}
	g := &action.Gate{
		Index:     idx,
		CreatedAt: time.UnixMilli(d.Num(gAction)).UTC(),
		Cap:       int(d.Num(gCap)),
		ActiveAt:  time.UnixMilli(d.Num(gActive)).UTC(),
		ExpiresAt: time.UnixMilli(d.Num(gExpires)).UTC(),
		Entries:   map[string]action.Entry{},
		Closed:    item[gClosed] != nil,
		Clock:     time.UnixMilli(d.Num(gClock)).UTC(),
		TTL:       d.Num(attrTTL),
		Reach:     int(d.Num(gReach)),
		SoldOut:   item[gSoldOut] != nil,
	}
	if b, ok := item[gLast].(*types.AttributeValueMemberB); ok {
		l, ok := decodeLast(b.Value)
		if !ok {
			d.Fail(gLast)
		}
		g.LastRelease, g.LastReleaseTime = l.Token, l.Entry.At
	}
	for name, v := range item {
		switch {
		case strings.HasPrefix(name, gEntry):
			b, ok := v.(*types.AttributeValueMemberB)
			e, ok2 := decodeEntry(bytesOf(b, ok))
			if !ok || !ok2 {
				d.Fail(name)
				continue
			}
			g.Entries[name[len(gEntry):]] = e
		case strings.HasPrefix(name, gForward):
			s, ok := v.(*types.AttributeValueMemberS)
			f, ok2 := parseForward(strOf(s, ok))
			if !ok || !ok2 {
				d.Fail(name)
				continue
			}
			if g.Forwards == nil {
				g.Forwards = map[string]action.Forward{}
			}
			g.Forwards[name[len(gForward):]] = f
		}
	}
	g.Held = int(d.Num(gHeld))
	if d.Err != nil {
		return nil, d.Err
	}
	return g, nil
}

func bytesOf(b *types.AttributeValueMemberB, ok bool) []byte {
	if !ok {
		return nil
	}
	return b.Value
}

func strOf(s *types.AttributeValueMemberS, ok bool) string {
	if !ok {
		return ""
	}
	return s.Value
}

// A forward is "gate/ms/ref": the gate that holds the useId's use, when the
// forward was written (a forward whose gate never got the entry is stale
// after callPatience) and the take that wrote it (forwards written before
// they named it are "gate/ms").
func forward(f action.Forward) string {
	return strconv.Itoa(f.Gate) + "/" + strconv.FormatInt(f.At.UnixMilli(), 10) + "/" + f.Ref
}

func parseForward(s string) (action.Forward, bool) {
	a, rest, ok := strings.Cut(s, "/")
	b, ref, _ := strings.Cut(rest, "/")
	i, err1 := strconv.Atoi(a)
	ms, err2 := strconv.ParseInt(b, 10, 64)
	return action.Forward{Gate: i, At: time.UnixMilli(ms).UTC(), Ref: ref}, ok && err1 == nil && err2 == nil
}

// callPatience is how long a call may stay between its two writes (a
// take's forward and its entry, a release's stamp and its gate write)
// before another call of the same useId treats it as stopped. An API
// function lives at most its timeout (10 s), so a call that stayed this
// long is not coming back.
const callPatience = 30 * time.Second

// gateWrite runs one conditional UpdateItem on gate i of the action with
// item key itemKey: the expression builder's update and condition. It
// returns the gate as written (when rv asks for it) or, when the
// condition failed, the gate the write saw (nil when there was none).
func (st *Store) gateWrite(ctx context.Context, itemKey string, i int, upd expression.UpdateBuilder, cond expression.ConditionBuilder, rv types.ReturnValue) (written, old *action.Gate, failed bool, err error) {
	w, o, failed, err := st.exprWrite(ctx, gateKey(itemKey, i), upd, &cond, rv)
	switch {
	case err != nil:
		return nil, nil, false, err
	case failed && o == nil:
		return nil, nil, true, nil
	case failed:
		old, err = DecodeGate(o)
		return nil, old, true, err
	case len(w) == 0:
		return nil, nil, false, nil
	}
	written, err = DecodeGate(w)
	return written, nil, false, err
}

// exprWrite runs one UpdateItem built with the SDK's expression builder
// (cond nil: unconditional). When the condition fails, failed is true and
// old is the item the write saw (nil if there was none).
func (st *Store) exprWrite(ctx context.Context, pk string, upd expression.UpdateBuilder, cond *expression.ConditionBuilder, rv types.ReturnValue) (written, old map[string]types.AttributeValue, failed bool, err error) {
	b := expression.NewBuilder().WithUpdate(upd)
	if cond != nil {
		b = b.WithCondition(*cond)
	}
	e, err := b.Build()
	if err != nil {
		return nil, nil, false, err
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                 &st.table,
		Key:                       key(pk),
		UpdateExpression:          e.Update(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
		ReturnValues:              rv,
	}
	if cond != nil {
		in.ConditionExpression = e.Condition()
		in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
	written, old, failed, err = dynamoitem.Update(ctx, st.db, in, resendCounter(ctx)...)
	if err != nil {
		return nil, nil, false, classifyErr(err)
	}
	return written, old, failed, nil
}

// countResends returns ctx with a counter of the attempts the SDK makes of
// the writes made with it (exprWrite) after an attempt whose outcome is
// unknown (no answer, or a 5xx): such a write may have applied before. A
// re-send after a 4xx (a throttle, a write conflict with another Region)
// is not counted: that answer says the attempt applied nothing.
func countResends(ctx context.Context) (context.Context, *atomic.Int32) {
	n := new(atomic.Int32)
	return context.WithValue(ctx, resendsKey{}, n), n
}

type resendsKey struct{}

// resendCounter is the SDK option that counts a write's re-sends into
// ctx's counter (none without one).
func resendCounter(ctx context.Context) []func(*dynamodb.Options) {
	n, ok := ctx.Value(resendsKey{}).(*atomic.Int32)
	if !ok {
		return nil
	}
	return []func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			unknown := false // the last attempt's outcome
			return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("exactonce.resends",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					if unknown {
						n.Add(1)
					}
					out, md, err := next.HandleFinalize(ctx, in)
					var answer *awshttp.ResponseError
					// (A request that got no answer is a ResponseError too, of status 0.)
					unknown = err != nil && !(errors.As(err, &answer) && answer.HTTPStatusCode() >= 400 && answer.HTTPStatusCode() < 500)
					return out, md, err
				}), "Retry", middleware.After)
		})
	}}
}

// readGates reads gates idx of an action with strongly consistent reads
// (BatchGetItem, 100 a request, in parallel), in idx's order: nil where a
// gate is missing or is not this action's (a stale one of an earlier action
// of the same id, or past its ttl).
func (st *Store) readGates(ctx context.Context, a *action.Action, idx []int, now time.Time) ([]*action.Gate, error) {
	return st.readGatesOf(ctx, a, idx, "", now)
}

// probeGates is readGates of what one useId's take needs of each gate: its
// state and counts, and that useId's entry or forward (a few dozen bytes a
// gate, not the whole gate).
func (st *Store) probeGates(ctx context.Context, a *action.Action, idx []int, tok string, now time.Time) ([]*action.Gate, error) {
	return st.readGatesOf(ctx, a, idx, tok, now)
}

func (st *Store) readGatesOf(ctx context.Context, a *action.Action, idx []int, tok string, now time.Time) ([]*action.Gate, error) {
	itemKey := tenant.ItemKey(a.Tenant, a.ID)
	keys := make([]string, len(idx))
	for k, i := range idx {
		keys[k] = gateKey(itemKey, i)
	}
	var proj []string
	if tok != "" {
		proj = []string{gAction, gCap, gHeld, gActive, gExpires, gClosed, gClock, attrTTL, gReach, gSoldOut, gEntry + tok, gForward + tok}
	}
	items, err := st.readItems(ctx, keys, proj)
	if err != nil {
		return nil, err
	}
	out := make([]*action.Gate, len(idx))
	for k, it := range items {
		if it == nil {
			continue
		}
		g, err := DecodeGate(it)
		if err != nil {
			return nil, err
		}
		if g.Live(a.CreatedAt, now) {
			out[k] = g
		}
	}
	return out, nil
}

// readItems reads items by partition key with strongly consistent
// BatchGetItems (100 keys each, up to 8 at once), in keys' order (nil where
// an item is missing). proj, when set, is the attributes to return.
func (st *Store) readItems(ctx context.Context, keys []string, proj []string) ([]map[string]types.AttributeValue, error) {
	return st.read(ctx, keys, proj, true)
}

// read is readItems, with eventually consistent reads (half the read units)
// unless consistent.
func (st *Store) read(ctx context.Context, keys []string, proj []string, consistent bool) ([]map[string]types.AttributeValue, error) {
	byKey := make(map[string]map[string]types.AttributeValue, len(keys))
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	uniq := slices.Compact(slices.Sorted(slices.Values(keys)))
	for chunk := range slices.Chunk(uniq, batchGetMax) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			items, err := st.batchRead(ctx, chunk, proj, consistent)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			maps.Copy(byKey, items)
		})
	}
	wg.Wait()
	out := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out, firstErr // with an error, what was read (errUnprocessed: all but those keys)
}

// batchRead is one chunk of readItems, retrying the keys DynamoDB leaves
// unprocessed with the SDK's backoff.
func (st *Store) batchRead(ctx context.Context, keys []string, proj []string, consistent bool) (map[string]map[string]types.AttributeValue, error) {
	ka := types.KeysAndAttributes{ConsistentRead: aws.Bool(consistent)}
	for _, k := range keys {
		ka.Keys = append(ka.Keys, key(k))
	}
	if len(proj) > 0 {
		p := expression.NamesList(expression.Name(attrID))
		for _, a := range proj {
			p = p.AddNames(expression.Name(a))
		}
		e, err := expression.NewBuilder().WithProjection(p).Build()
		if err != nil {
			return nil, err
		}
		ka.ProjectionExpression, ka.ExpressionAttributeNames = e.Projection(), e.Names()
	}
	out := map[string]map[string]types.AttributeValue{}
	req := map[string]types.KeysAndAttributes{st.table: ka}
	err := retryUnprocessed(ctx, func(ctx context.Context) (bool, error) {
		res, err := st.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return false, classifyErr(err)
		}
		for _, it := range res.Responses[st.table] {
			if pk, ok := it[attrID].(*types.AttributeValueMemberS); ok {
				out[pk.Value] = it
			}
		}
		req = res.UnprocessedKeys
		return len(req) == 0, nil
	})
	return out, err
}

// countHeld sets UsesHeld on every multi-use action of as from its gates
// (one BatchGetItem per 100 gates of all of them), but those legacy says
// were written before gates (their item holds the count).
func (st *Store) countHeld(ctx context.Context, as []*action.Action, legacy func(*action.Action) bool, now time.Time) error {
	type at struct{ a, g int }
	var keys []string
	var where []at
	for k, a := range as {
		if a == nil || !a.MultiUse() || legacy != nil && legacy(a) {
			continue
		}
		a.UsesHeld = 0
		itemKey := tenant.ItemKey(a.Tenant, a.ID)
		for i := range action.Gates(a.MaxUses) {
			keys = append(keys, gateKey(itemKey, i))
			where = append(where, at{k, i})
		}
	}
	if len(keys) == 0 {
		return nil
	}
	items, err := st.readItems(ctx, keys, []string{gAction, gHeld, attrTTL})
	if err != nil {
		return err
	}
	for k, it := range items {
		if it == nil {
			continue
		}
		a := as[where[k].a]
		d := dynamoitem.Decoder{Item: it}
		if d.Num(gAction) != a.CreatedAt.UnixMilli() || d.Num(attrTTL) < now.Unix() {
			if d.Err != nil {
				return d.Err // a gate that does not decode tells nothing: not a free use
			}
			continue
		}
		if it[gHeld] == nil {
			d.Fail(gHeld) // every gate of an action is written with its count
		}
		held := d.Num(gHeld)
		if d.Err != nil {
			return d.Err // its uses are held all the same: a count of 0 would show them free
		}
		a.UsesHeld += int(held)
	}
	return nil
}

// closeGates closes every gate of a (creating a closed one where none was
// written yet), before the cancel's own write, so no take or release
// commits after the cancel; the cancel's details go with it, so a take
// that finds a gate closed can finish a cancel that stopped half way. It
// returns the latest time a take or release the gates hold committed at:
// the cancel is stamped after it.
func (st *Store) closeGates(ctx context.Context, a *action.Action, c Cancel, ttl int64) (time.Time, error) {
	itemKey := tenant.ItemKey(a.Tenant, a.ID)
	info := map[string]types.AttributeValue{"r": s(c.Reason), "k": s(c.Write.Key), "f": s(c.Write.Fingerprint), "q": s(c.Write.RequestID)}
	var latest time.Time
	var mu sync.Mutex
	err := parallel(ctx, action.Gates(a.MaxUses), func(ctx context.Context, i int) error {
		now := action.Millis(c.Now)
		// (A builder shares its operations with the builders made from it:
		// each write gets its own.)
		closing := func() expression.UpdateBuilder {
			return expression.Set(expression.Name(gClosed), expression.Value(now.UnixMilli())).
				Set(expression.Name(gCancel), expression.Value(&types.AttributeValueMemberM{Value: info})).
				Set(expression.Name(attrTTL), expression.Value(ttl))
		}
		// This action's gate keeps its uses (they were taken); a missing or
		// stale one becomes a closed gate of this action.
		mine := expression.Name(gAction).Equal(expression.Value(a.CreatedAt.UnixMilli())).
			And(expression.Name(attrTTL).GreaterThanEqual(expression.Value(now.Unix())))
		var g *action.Gate
		var err error
		for try := 0; try < 8; try++ {
			var old *action.Gate
			var failed bool
			if g, old, failed, err = st.gateWrite(ctx, itemKey, i, closing(), mine, types.ReturnValueAllNew); err != nil || !failed {
				break
			}
			// No gate of this action yet (or a stale one of an earlier action
			// of this id, whose entries go): a closed one, unless a take
			// created it meanwhile (then close that one).
			tomb := closing().Set(expression.Name(gAction), expression.Value(a.CreatedAt.UnixMilli())).
				Set(expression.Name(gHeld), expression.Value(0)).
				Remove(expression.Name(gReach)).Remove(expression.Name(gSoldOut)).Remove(expression.Name(gSealing))
			none := expression.AttributeNotExists(expression.Name(attrID))
			if old != nil {
				for tok := range old.Entries {
					tomb = tomb.Remove(expression.Name(gEntry + tok))
				}
				for tok := range old.Forwards {
					tomb = tomb.Remove(expression.Name(gForward + tok))
				}
				none = expression.Name(gAction).Equal(expression.Value(old.CreatedAt.UnixMilli())).
					And(expression.Name(attrTTL).Equal(expression.Value(old.TTL)))
			}
			if _, _, failed, err = st.exprWrite(ctx, gateKey(itemKey, i), tomb, &none, types.ReturnValueNone); err != nil || !failed {
				g = nil
				break
			}
		}
		if err != nil || g == nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		latest = later(latest, g.Clock) // the last take or release it carried (a releasable action's)
		for _, e := range g.Entries {
			latest = later(latest, e.At)
		}
		return nil
	})
	return latest, err
}

// parallel runs f for 0..n-1, at most 16 at once, and returns the first error.
func parallel(ctx context.Context, n int, f func(context.Context, int) error) error {
	return parallelN(ctx, n, 16, f)
}

// parallelN runs f for 0..n-1, at most width at once, and returns the first error.
func parallelN(ctx context.Context, n, width int, f func(context.Context, int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	sem := make(chan struct{}, width)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(ctx, i); err != nil {
				once.Do(func() { first = err })
			}
		})
	}
	wg.Wait()
	return first
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// UsesPage is one page of an action's held uses.
type UsesPage struct {
	Uses   []HeldUse
	Cursor string // "" at the end
}

// HeldUse is a held use as a listing shows it.
type HeldUse struct {
	UseID  string
	UsedAt time.Time
}

// ErrBadUsesCursor is a uses cursor this store did not hand out.
var ErrBadUsesCursor = &action.InvalidError{Field: "cursor", Message: "is not a cursor this API returned"}

// usesCursor is a place in the listing: the gate, and the last useId
// listed from it.
func usesCursor(gate int, useID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(gate) + "." + useID))
}

func parseUsesCursor(c string, gates int) (int, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", ErrBadUsesCursor
	}
	g, id, ok := strings.Cut(string(b), ".")
	i, err := strconv.Atoi(g)
	if !ok || err != nil || i < 0 || i >= gates || action.ValidateUseID(id) != nil {
		return 0, "", ErrBadUsesCursor
	}
	return i, id, nil
}

// ListUses returns one page of the uses a multi-use action holds: gate by
// gate, by useId within a gate (so an action of up to action.GateSeats uses
// lists in useId order), after cursor. It reads the gates (one
// BatchGetItem per 100) and the use records of the gates it lists (one per
// 100).
func (st *Store) ListUses(ctx context.Context, tenantName, id, cursor string, limit int, now time.Time) (*action.Action, *UsesPage, error) {
	a, err := st.multiUse(ctx, tenantName, id, now, true)
	if err != nil {
		return nil, nil, err
	}
	gates := action.Gates(a.MaxUses)
	from, after := 0, ""
	if cursor != "" {
		if from, after, err = parseUsesCursor(cursor, gates); err != nil {
			return nil, nil, err
		}
	}
	itemKey := tenant.ItemKey(a.Tenant, a.ID)
	out := &UsesPage{Uses: []HeldUse{}}
	lastGate := from
	for start := from; start < gates; start += batchGetMax {
		idx := make([]int, 0, batchGetMax)
		for i := start; i < min(start+batchGetMax, gates); i++ {
			idx = append(idx, i)
		}
		gs, err := st.readGates(ctx, a, idx, now)
		if err != nil {
			return nil, nil, err
		}
		for k := 0; k < len(gs); {
			// The gates from k whose entries cover what the page still
			// needs (one more, to know whether more follow), and their records.
			var keys []string
			var owner []int
			var ents []action.Entry
			j := k
			for ; j < len(gs) && len(keys) <= limit-len(out.Uses); j++ {
				if gs[j] == nil {
					continue
				}
				for _, e := range gs[j].Entries {
					keys, owner, ents = append(keys, recordKey(itemKey, e.Ref)), append(owner, j), append(ents, e)
				}
			}
			recs, err := st.readItems(ctx, keys, []string{rUseID})
			if err != nil {
				return nil, nil, err
			}
			per := map[int][]HeldUse{}
			for r, item := range recs {
				d := dynamoitem.Decoder{Item: item}
				if u := d.Str(rUseID); u != "" && (idx[owner[r]] != from || u > after) {
					per[owner[r]] = append(per[owner[r]], HeldUse{UseID: u, UsedAt: ents[r].At})
				}
			}
			for g := k; g < j; g++ {
				uses := per[g]
				slices.SortFunc(uses, func(x, y HeldUse) int { return strings.Compare(x.UseID, y.UseID) })
				for _, u := range uses {
					if len(out.Uses) == limit {
						out.Cursor = usesCursor(lastGate, out.Uses[limit-1].UseID)
						return a, out, nil
					}
					out.Uses, lastGate = append(out.Uses, u), idx[g]
				}
			}
			k = j
		}
	}
	return a, out, nil
}

// ReadUseContext reads, for the events of uses (the publisher, republish),
// the actions with the given item keys and the use records with the given
// names (recordKeys: item key and record name), strongly consistent, one
// BatchGetItem per 100. What is missing is left out of the maps; so is an
// item that does not decode (one edited by hand), which Unreadable names.
func (st *Store) ReadUseContext(ctx context.Context, itemKeys []string, records []RecordKey) (*UseContext, error) {
	keys := make([]string, 0, len(itemKeys)+len(records))
	keys = append(keys, itemKeys...)
	for _, r := range records {
		keys = append(keys, recordKey(r.ItemKey, r.Ref))
	}
	items, err := st.readItems(ctx, keys, nil)
	if err != nil {
		return nil, err
	}
	c := &UseContext{Actions: map[string]*action.Action{}, Records: map[RecordKey]*action.UseRecord{}, Unreadable: map[string]error{}}
	for i, it := range items {
		switch {
		case it == nil:
		case i < len(itemKeys):
			if a, err := Decode(it); err != nil {
				c.Unreadable[keys[i]] = err
			} else {
				c.Actions[itemKeys[i]] = a
			}
		default:
			if r, err := DecodeRecord(it); err != nil {
				c.Unreadable[keys[i]] = err
			} else {
				c.Records[records[i-len(itemKeys)]] = r
			}
		}
	}
	return c, nil
}

// UseContext is what ReadUseContext read: actions by item key, use records
// by RecordKey, and the items there that do not decode, by partition key,
// with why.
type UseContext struct {
	Actions    map[string]*action.Action
	Records    map[RecordKey]*action.UseRecord
	Unreadable map[string]error
}

// ErrUseGone is a use whose action or take record is not in the table:
// deleted since, or the id's action now is another (created again after
// the first one's retention ended).
var ErrUseGone = errors.New("store: the action or take record of this use is not in the table")

// Use returns the action and the take record of use k, taken from the
// gate of the action created at createdAt: an error when either does not
// decode, and ErrUseGone when either is missing or belongs to another
// action of that id.
func (c *UseContext) Use(k RecordKey, createdAt time.Time) (*action.Action, *action.UseRecord, error) {
	for _, pk := range []string{k.ItemKey, recordKey(k.ItemKey, k.Ref)} {
		if err := c.Unreadable[pk]; err != nil {
			return nil, nil, err
		}
	}
	a, rec := c.Action(k.ItemKey, createdAt), c.Records[k]
	if a == nil || rec == nil || !rec.ActionCreatedAt.Equal(createdAt) {
		return nil, nil, ErrUseGone
	}
	return a, rec, nil
}

// Action is the action read under itemKey if it is the one created at
// createdAt; nil when none was read, or the id's action now is another.
func (c *UseContext) Action(itemKey string, createdAt time.Time) *action.Action {
	if a := c.Actions[itemKey]; a != nil && a.CreatedAt.Equal(createdAt) {
		return a
	}
	return nil
}

// RecordKey names a use record: its action's item key and its name.
type RecordKey struct{ ItemKey, Ref string }

// Released keeps, of recs (take records stamped by a release, with their
// actions as), those whose use has left its gate: a release stamps the
// take's record before its gate write, so a stamped record whose entry is
// still held is a release that has not freed it (yet, or ever: its write
// failed). It reads each use's home gate and, where one forwards it, the
// gate it names (BatchGetItems of 100). A gate that does not decode (one
// edited by hand) tells nothing: its records are left out, and its key
// is in unreadable.
func (st *Store) Released(ctx context.Context, as map[string]*action.Action, recs []ReleasedRecord, now time.Time) (_ []ReleasedRecord, unreadable []string, _ error) {
	where := make([]string, len(recs)) // the gate to read for each record
	for k, r := range recs {
		if a := as[r.ItemKey]; a != nil && a.MultiUse() {
			where[k] = gateKey(r.ItemKey, action.HomeGate(action.UseToken(r.Record.UseID), action.Gates(a.MaxUses)))
		}
	}
	held := make([]bool, len(recs))
	for range 2 { // the home gates, then the gates they forward to
		var keys []string
		var of []int
		for k, w := range where {
			if w != "" {
				keys, of = append(keys, w), append(of, k)
			}
		}
		if len(keys) == 0 {
			break
		}
		items, err := st.readItems(ctx, keys, nil)
		if err != nil {
			return nil, nil, err
		}
		for i, it := range items {
			k := of[i]
			where[k] = ""
			if it == nil {
				continue
			}
			g, err := DecodeGate(it)
			if err != nil {
				held[k], unreadable = true, append(unreadable, keys[i])
				continue
			}
			a, tok := as[recs[k].ItemKey], action.UseToken(recs[k].Record.UseID)
			if !g.Live(a.CreatedAt, now) {
				continue
			}
			if e, ok := g.Entries[tok]; ok {
				held[k] = e.Ref == recs[k].Record.Ref
			} else if f, ok := g.Forwards[tok]; ok && f.Gate != g.Index {
				where[k] = gateKey(recs[k].ItemKey, f.Gate)
			}
		}
	}
	out := recs[:0:0]
	for k, r := range recs {
		if !held[k] {
			out = append(out, r)
		}
	}
	return out, slices.Compact(slices.Sorted(slices.Values(unreadable))), nil
}
