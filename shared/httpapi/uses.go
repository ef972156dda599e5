package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
)

// Route keys of the uses of a multi-use action.
const (
	RouteUseRelease = "POST /actions/{actionId}/uses/{useId}/release"
	RouteUseList    = "GET /actions/{actionId}/uses"
)

// MaxUsesPage is how many held uses one page of GET .../uses lists.
const MaxUsesPage = 100

// UseView is one held use, as a listing shows it (never a payload).
type UseView struct {
	UseID  string `json:"useId"`
	UsedAt string `json:"usedAt"`
}

// UsesView is a page of an action's held uses, in useId order.
type UsesView struct {
	Uses   []UseView `json:"uses"`
	Cursor string    `json:"cursor,omitempty"`
}

// ReleaseView answers a release: which use, taken when, released when.
type ReleaseView struct {
	ActionID   string `json:"actionId"`
	UseID      string `json:"useId"`
	UsedAt     string `json:"usedAt"`
	ReleasedAt string `json:"releasedAt"`
}

// useCounts adds a multi-use action's counts to its view.
func useCounts(v *View, a *action.Action) {
	held, left := a.UsesHeld, a.UsesRemaining()
	v.MaxUses, v.Releasable, v.UsesHeld, v.UsesRemaining = &a.MaxUses, a.Releasable, &held, &left
}

// take answers a consume that names a useId: the store takes the use (its
// call's record, then one conditional write on a gate); the same useId
// again, or the call re-sent, answers as its first take. A take's answer
// carries no usesHeld: the action's total is GET's (its uses are spread
// over gates; counting them all is a read this write does not make).
func (a *API) take(ctx context.Context, c *call, id string, req *action.ConsumeRequest, r *request) (events.APIGatewayV2HTTPResponse, error) {
	t, err := a.store.Take(ctx, id, store.Take{
		Tenant: c.tenant, UseID: req.UseID, Reason: req.Reason, Write: r.write(c.requestID), Fingerprints: r.fingerprints,
		KeyIDs: c.keys.KeyIDs(), Now: a.Now(),
	})
	if err != nil {
		return fail(err)
	}
	var headers map[string]string
	c.outcome = "used"
	if t.Replayed {
		c.outcome, headers = "replayed", replayHeader(t.Write, r)
	}
	v := view(asUsed(t.Action), t.UsedAt)
	v.UsesHeld, v.UsesRemaining = nil, nil
	v.UseID, v.UsedAt = t.UseID, store.FormatTime(t.UsedAt)
	return consumed(c, t.Action, v, headers)
}

// asUsed is a as a take answers it: what happened to the action since the
// take (a cancellation, an expiry mark) left out, so a repeated take
// answers byte for byte as the first.
func asUsed(a *action.Action) *action.Action {
	u := *a
	u.CanceledAt, u.CancelReason, u.ExpiredAt = time.Time{}, "", time.Time{}
	return &u
}

// consumed answers a successful consume or take: v with the payload.
func consumed(c *call, act *action.Action, v *View, headers map[string]string) (events.APIGatewayV2HTTPResponse, error) {
	if act.Payload != nil {
		plain, err := open(c.keys, act)
		if err != nil {
			return fail(err)
		}
		v.Payload = plain
	}
	return respond(http.StatusOK, v, headers), nil
}

// ReleaseUse handles POST /actions/{actionId}/uses/{useId}/release: the
// release is stamped on the take's record, then one conditional write on
// its gate frees the use (store.Release). With an Idempotency-Key the call
// is recorded first, so re-sending it replays its answer.
func (a *API) ReleaseUse(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteUseRelease, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		id, err := pathID(&ev, c)
		if err != nil {
			return fail(err)
		}
		useID := ev.PathParameters["useId"]
		if err := action.ValidateUseID(useID); err != nil {
			return fail(err)
		}
		var req action.ReleaseRequest
		r, err := readRequest(&ev, c.keys, true, MaxBodyBytes, &req)
		if err != nil {
			return fail(err)
		}
		// The call is its route, its use and its body: a release of another
		// use with the same key and body is another call.
		call := append([]byte(RouteUseRelease+"\x00"+useID+"\x00"), r.canon...)
		w := r.write(c.requestID)
		w.Fingerprint = c.keys.Fingerprint(call)
		fps := c.keys.Fingerprints(call)
		rel, err := a.store.Release(ctx, id, store.Release{Tenant: c.tenant, UseID: useID, Write: w, Fingerprints: fps, Now: a.Now()})
		if err != nil {
			return fail(err)
		}
		var headers map[string]string
		c.outcome = "released"
		if rel.Replayed {
			c.outcome, headers = "already_released", replayHeader(w, &request{key: w.Key, fingerprints: fps})
		}
		return respond(http.StatusOK, &ReleaseView{ActionID: rel.Action.ID, UseID: useID,
			UsedAt: store.FormatTime(rel.UsedAt), ReleasedAt: store.FormatTime(rel.ReleasedAt)}, headers), nil
	})
}

// ListUses handles GET /actions/{actionId}/uses?cursor=&limit=: the held
// uses of the caller's action, page by page over its gates (the cursor is
// opaque: the place after the page before).
func (a *API) ListUses(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteUseList, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		id, err := pathID(&ev, c)
		if err != nil {
			return fail(err)
		}
		q, err := query(&ev, "limit", "cursor")
		if err != nil {
			return fail(err)
		}
		limit, err := pageLimit(q, MaxUsesPage, MaxUsesPage)
		if err != nil {
			return fail(err)
		}
		cursor, hasCursor := q["cursor"]
		if hasCursor && cursor == "" {
			return fail(store.ErrBadUsesCursor)
		}
		_, page, err := a.store.ListUses(ctx, c.tenant, id, cursor, limit, a.Now())
		if err != nil {
			return fail(err)
		}
		out := &UsesView{Uses: make([]UseView, 0, len(page.Uses)), Cursor: page.Cursor}
		for _, u := range page.Uses {
			out.Uses = append(out.Uses, UseView{UseID: u.UseID, UsedAt: store.FormatTime(u.UsedAt)})
		}
		c.outcome = "ok"
		return respond(http.StatusOK, out, nil), nil
	})
}
