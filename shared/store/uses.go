package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/exactonce/exactonce/internal/dynamoitem"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/tenant"
)

// Attributes of a multi-use action (a single-use item has none of them).
// Each use is its own top-level attribute, like a PIN guess (pinTry:): no
// parent map has to exist before the first use, and an empty map never
// reaches a stream image (the local stream pipeline showed an empty map
// attribute as another attribute's value).
const (
	attrMaxUses    = "maxUses"
	attrReleasable = "releasable" // true, or absent
	attrUsesHeld   = "usesHeld"
	attrUse        = "use:"    // + useId: the useId's latest use (a map of the fields below)
	attrUseN       = "useN:"   // + useId: uses held right after it was taken (one update cannot set a map and a path in it)
	attrUseKey     = "useKey:" // + keyed digest of a take's Idempotency-Key: the useId it took
	attrRelKey     = "relKey:" // + keyed digest of a release's Idempotency-Key: the release it made (a map of the fields below)
	attrRelAt      = "relAt:"  // + the same digest: the released use's take time, copied from it by the release's write

	// Fields of one use.
	useAt         = "at"
	useReason     = "reason"
	useKey        = "k"
	useFP         = "f"
	useReleasedAt = "rel"
	useRelKey     = "rk"
	useRelFP      = "rf"

	// Fields of a keyed release (relKey:).
	relUseID = "u"
	relRel   = "rel"
	relFP    = "f"
)

// setUses adds a multi-use action's fields to its create.
func setUses(u *update, a *action.Action) {
	u.set(attrMaxUses, n(int64(a.MaxUses)))
	if a.Releasable {
		u.set(attrReleasable, &types.AttributeValueMemberBOOL{Value: true})
	}
	u.set(attrUsesHeld, n(0))
}

// decodeUses reads a multi-use action's fields.
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
	a.UsesHeld = int(d.Num(attrUsesHeld))
	a.Uses, a.UseKeys, a.RelKeys = map[string]action.Use{}, map[string]string{}, map[string]action.KeyedRelease{}
	for name, v := range d.Item {
		if k, ok := strings.CutPrefix(name, attrUseKey); ok {
			a.UseKeys[k] = d.Str(name)
			continue
		}
		if k, ok := strings.CutPrefix(name, attrRelKey); ok {
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				d.Fail(name)
				continue
			}
			f := dynamoitem.Decoder{Item: m.Value}
			r := action.KeyedRelease{UseID: f.Str(relUseID), At: d.Time(attrRelAt + k), ReleasedAt: f.Time(relRel), Fingerprint: f.Str(relFP)}
			if f.Err != nil || r.UseID == "" || r.At.IsZero() || r.ReleasedAt.IsZero() {
				d.Fail(name)
			}
			a.RelKeys[k] = r
			continue
		}
		id, ok := strings.CutPrefix(name, attrUse)
		if !ok {
			continue
		}
		m, ok := v.(*types.AttributeValueMemberM)
		if !ok {
			d.Fail(name)
			continue
		}
		f := dynamoitem.Decoder{Item: m.Value}
		use := action.Use{
			At: f.Time(useAt), N: int(d.Num(attrUseN + id)), Reason: f.Str(useReason),
			Write:      action.Write{Key: f.Str(useKey), Fingerprint: f.Str(useFP)},
			ReleasedAt: f.Time(useReleasedAt),
			Release:    action.Write{Key: f.Str(useRelKey), Fingerprint: f.Str(useRelFP)},
		}
		if f.Err != nil || use.At.IsZero() {
			d.Fail(name)
		}
		a.Uses[id] = use
	}
}

// Take is a request to take one use of a multi-use action.
type Take struct {
	Tenant       string // whose action
	UseID        string
	Reason       string
	Write        action.Write // its Key and Fingerprint are kept with the use when a key was sent
	Fingerprints []string     // the request's under every known key set
	KeyIDs       []string     // the key sets this server knows (see Consume)
	Now          time.Time
}

// Take gives t.UseID one use of the action with ONE conditional write: the
// condition holds while the action is open and active, this useId holds no
// use (it never took one, or released it), fewer than maxUses are held and
// (for a keyed call) the key took no use before. A refusal is classified
// from the old item the same request returns (action.ClassifyUse): a
// *action.Replay for a useId that holds its use already.
func (st *Store) Take(ctx context.Context, id string, t Take) (*action.Action, error) {
	pk := tenant.ItemKey(t.Tenant, id)
	now := action.Millis(t.Now)
	u := newUpdate()
	entry := map[string]types.AttributeValue{useAt: ts(now)}
	if t.Reason != "" {
		entry[useReason] = s(t.Reason)
	}
	if t.Write.Key != "" {
		entry[useKey], entry[useFP] = s(t.Write.Key), s(t.Write.Fingerprint)
	}
	held, use := u.name(attrUsesHeld), u.name(attrUse+t.UseID)
	one := u.value("one", n(1))
	u.sets = append(u.sets,
		use+" = "+u.value("entry", &types.AttributeValueMemberM{Value: entry}),
		u.name(attrUseN+t.UseID)+" = "+held+" + "+one,
		held+" = "+held+" + "+one)
	cond := condConsumable + " AND {" + attrUsesHeld + "} < {" + attrMaxUses + "}" +
		" AND (attribute_not_exists(" + use + ") OR attribute_exists(" + use + "." + u.name(useReleasedAt) + "))"
	if t.Write.Key != "" {
		k := u.name(attrUseKey + t.Write.Key)
		u.sets = append(u.sets, k+" = "+u.value("useId", s(t.UseID)))
		cond += " AND attribute_not_exists(" + k + ")"
	}
	u.value("nowMs", n(now.UnixMilli()))
	written, old, err := st.update(ctx, pk, u, u.cond(cond+st.knownKeys(u, t.KeyIDs)), types.ReturnValueAllNew)
	if itemFull(err) {
		// The use does not fit in DynamoDB's 400 KB item (large useIds,
		// reasons and keys on a large maxUses): no use is left. Nothing was
		// written; the uses held stay answerable.
		return nil, action.Reject(action.CodeNoUsesLeft, nil)
	}
	if err != nil {
		return nil, err
	}
	if old == nil {
		return written, nil
	}
	why := action.ClassifyUse(old, action.Attempt{Now: now, Key: t.Write.Key, Fingerprints: t.Fingerprints, UseID: t.UseID})
	return nil, unknownKey(why, old, t.KeyIDs)
}

// itemFull reports whether DynamoDB refused a write because the item would
// outgrow its 400 KB limit.
func itemFull(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException" && strings.Contains(apiErr.ErrorMessage(), "Item size")
}

// unknownKey turns a refusal the domain cannot explain into an
// *action.UnknownKeyError when the item is under a key set not in ids.
func unknownKey(why error, old *action.Action, ids []string) error {
	if r, ok := why.(*action.Rejection); ok && r.Code == action.CodeInternal && old.KeyID != "" && !slices.Contains(ids, old.KeyID) {
		return &action.UnknownKeyError{KeyID: old.KeyID}
	}
	return why
}

// Release is a request to give back one use of a releasable action.
type Release struct {
	Tenant       string
	UseID        string
	Write        action.Write
	Fingerprints []string
	Now          time.Time
}

// Release frees r.UseID's use with ONE conditional write (the action is
// open and releasable, the use is held and, for a keyed call, the key made
// no release before: relKey:<digest> records the release, so a re-send
// after the useId took a use again replays instead of freeing that use).
// Releasing it again answers with the first release (*action.Replay); other
// refusals are action.ClassifyRelease's.
func (st *Store) Release(ctx context.Context, id string, r Release) (*action.Action, error) {
	pk := tenant.ItemKey(r.Tenant, id)
	now := action.Millis(r.Now)
	u := newUpdate()
	use := u.name(attrUse + r.UseID)
	held := u.name(attrUsesHeld)
	u.sets = append(u.sets, use+"."+u.name(useReleasedAt)+" = "+u.value("rel", ts(now)),
		held+" = "+held+" - "+u.value("one", n(1)))
	u.value("nowMs", n(now.UnixMilli()))
	cond := condOpen + " AND attribute_exists({" + attrReleasable + "})" +
		" AND attribute_exists(" + use + "." + u.name(useAt) + ") AND attribute_not_exists(" + use + "." + u.name(useReleasedAt) + ")"
	if r.Write.Key != "" {
		u.sets = append(u.sets, use+"."+u.name(useRelKey)+" = "+u.value("rk", s(r.Write.Key)),
			use+"."+u.name(useRelFP)+" = "+u.value("rf", s(r.Write.Fingerprint)))
		// The release's record under its key; the use's take time is copied
		// from the item by the same write (a SET reads the old item).
		k := u.name(attrRelKey + r.Write.Key)
		u.sets = append(u.sets, k+" = "+u.value("relRec", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			relUseID: s(r.UseID), relRel: ts(now), relFP: s(r.Write.Fingerprint),
		}}), u.name(attrRelAt+r.Write.Key)+" = "+use+"."+u.name(useAt))
		cond += " AND attribute_not_exists(" + k + ")"
	}
	written, old, err := st.update(ctx, pk, u, u.cond(cond), types.ReturnValueAllNew)
	if err != nil {
		return nil, err
	}
	if old != nil {
		return nil, action.ClassifyRelease(old, action.Attempt{Now: now, Key: r.Write.Key, Fingerprints: r.Fingerprints, UseID: r.UseID})
	}
	return written, nil
}
