package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

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

// take answers a consume that names a useId: one conditional write takes
// the use; the same useId again answers as its first take.
func (a *API) take(ctx context.Context, c *call, id string, req *action.ConsumeRequest, r *request) (events.APIGatewayV2HTTPResponse, error) {
	act, err := a.store.Take(ctx, id, store.Take{
		Tenant: c.tenant, UseID: req.UseID, Reason: req.Reason, Write: r.write(c.requestID), Fingerprints: r.fingerprints,
		KeyIDs: c.keys.KeyIDs(), Now: a.Now(),
	})
	var headers map[string]string
	var replay *action.Replay
	switch {
	case errors.As(err, &replay):
		act, c.outcome = replay.Action, "replayed"
		headers = replayHeader(act.Uses[req.UseID].Write, r)
	case err != nil:
		return fail(err)
	default:
		c.outcome = "used"
	}
	use := act.Uses[req.UseID]
	v := view(act.AsUsed(use), use.At)
	v.UseID, v.UsedAt = req.UseID, store.FormatTime(use.At)
	return consumed(c, act, v, headers)
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

// ReleaseUse handles POST /actions/{actionId}/uses/{useId}/release: one
// conditional write frees the use; again, it answers with the first release.
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
		act, err := a.store.Release(ctx, id, store.Release{Tenant: c.tenant, UseID: useID, Write: w, Fingerprints: fps, Now: a.Now()})
		var headers map[string]string
		var replay *action.Replay
		switch {
		case errors.As(err, &replay):
			act, c.outcome = replay.Action, "already_released"
			headers = replayHeader(act.Uses[useID].Release, &request{key: w.Key, fingerprints: fps})
		case err != nil:
			return fail(err)
		default:
			c.outcome = "released"
		}
		use := act.Uses[useID]
		return respond(http.StatusOK, &ReleaseView{ActionID: act.ID, UseID: useID,
			UsedAt: store.FormatTime(use.At), ReleasedAt: store.FormatTime(use.ReleasedAt)}, headers), nil
	})
}

// ListUses handles GET /actions/{actionId}/uses?cursor=&limit=: the held
// uses of the caller's action, in useId order, after the cursor (the last
// useId of the page before).
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
		limit := MaxUsesPage
		if v, ok := q["limit"]; ok {
			if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > MaxUsesPage {
				return fail(&action.InvalidError{Field: "limit", Message: "must be a whole number from 1 to " + strconv.Itoa(MaxUsesPage)})
			}
		}
		cursor, hasCursor := q["cursor"]
		if hasCursor {
			if err := action.ValidateID("cursor", cursor); err != nil {
				return fail(err)
			}
		}
		act, err := a.store.Get(ctx, c.tenant, id)
		if err != nil {
			return fail(err)
		}
		out := &UsesView{Uses: []UseView{}}
		for _, u := range act.HeldUses() {
			if hasCursor && u.ID <= cursor {
				continue
			}
			if len(out.Uses) == limit {
				out.Cursor = out.Uses[limit-1].UseID
				break
			}
			out.Uses = append(out.Uses, UseView{UseID: u.ID, UsedAt: store.FormatTime(u.At)})
		}
		c.outcome = "ok"
		return respond(http.StatusOK, out, nil), nil
	})
}
