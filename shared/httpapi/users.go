package httpapi

import (
	"context"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/service"
	"github.com/exactonce/exactonce/shared/store"
)

// Route keys of a user's actions.
const (
	RouteUserList   = "GET /users/{userId}/actions"
	RouteUserCancel = "POST /users/{userId}/actions/cancel"
)

// cancelAllKeyScope starts what a cancel-all's Idempotency-Key is digested
// with for the cancel it writes on each action: a key names one call, and a
// cancel of one action with the same key is another. A key sent is
// printable ASCII, so no key a cancel sends digests the same.
const cancelAllKeyScope = RouteUserCancel + "\x00"

// DefaultListLimit is a page's size when the caller does not say.
const DefaultListLimit = 20

// ListView is a page of a user's actions (never a payload).
type ListView struct {
	Actions []*View `json:"actions"`
	Cursor  string  `json:"cursor,omitempty"`
}

// CancelAllRequest is the body of POST /users/{userId}/actions/cancel.
type CancelAllRequest struct {
	// Kind, when given, is one kind (1 to 64 characters): "" is refused,
	// as it could mean every kind or the actions without one.
	Kind   *string `json:"kind,omitempty"`
	Reason string  `json:"reason,omitempty"`
}

// CancelAllView answers a cancel-all: what this call canceled.
type CancelAllView struct {
	Canceled  int      `json:"canceled"`
	ActionIDs []string `json:"actionIds"`
}

// ListUser handles GET /users/{userId}/actions?kind=&state=&limit=&cursor=:
// the user's actions in the caller's tenant, newest first, as they are now.
func (a *API) ListUser(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteUserList, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		userID, err := pathUser(&ev)
		if err != nil {
			return fail(err)
		}
		q, err := query(&ev, "kind", "state", "limit", "cursor")
		if err != nil {
			return fail(err)
		}
		l := store.List{Tenant: c.tenant, UserID: userID, Kind: q["kind"], State: action.State(q["state"]),
			Limit: DefaultListLimit, Cursor: q["cursor"], Now: a.Now()}
		if l.Kind != "" {
			if err := action.ValidateToken("kind", l.Kind, action.MaxKindLen, "/"); err != nil {
				return fail(err)
			}
		}
		switch l.State {
		case "", action.StatePending, action.StateActive, action.StateConsumed, action.StateExpired:
		default:
			return fail(&action.InvalidError{Field: "state", Message: "must be pending, active, consumed or expired"})
		}
		if l.Limit, err = pageLimit(q, l.Limit, store.MaxListLimit); err != nil {
			return fail(err)
		}
		page, err := a.store.ListUser(ctx, l)
		if err != nil {
			return fail(err)
		}
		out := &ListView{Actions: make([]*View, len(page.Actions)), Cursor: page.Cursor}
		for i, act := range page.Actions {
			out.Actions[i] = view(act, l.Now)
		}
		c.outcome = "ok"
		return respond(http.StatusOK, out, nil), nil
	})
}

// CancelUser handles POST /users/{userId}/actions/cancel: every open action
// of the user (of one kind) in the caller's tenant is canceled, each by its
// own conditional write. Retried with its Idempotency-Key, it answers with
// the actions the call canceled, and cancels any opened since.
func (a *API) CancelUser(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteUserCancel, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		userID, err := pathUser(&ev)
		if err != nil {
			return fail(err)
		}
		var req CancelAllRequest
		r, err := readRequest(&ev, c.keys, true, MaxBodyBytes, &req)
		if err != nil {
			return fail(err)
		}
		var kind string
		if req.Kind != nil {
			if err := action.ValidateToken("kind", *req.Kind, action.MaxKindLen, "/"); err != nil {
				return fail(err)
			}
			kind = *req.Kind
		}
		if err := action.ValidateCancel(&action.CancelRequest{Reason: req.Reason}); err != nil {
			return fail(err)
		}
		// The call is its route, its user and its body: a cancel of one action
		// with the same key and body is another call (its fingerprint differs).
		call := append([]byte(RouteUserCancel+"\x00"+userID+"\x00"), r.canon...)
		w := r.write(c.requestID)
		w.Fingerprint = c.keys.Fingerprint(call)
		fps := c.keys.Fingerprints(call)
		var headers map[string]string
		var bareKey string
		if w.Key != "" {
			// A keyed call is recorded before it cancels anything: a call
			// that canceled nothing leaves no action to recognise it by.
			replayed, err := a.store.RecordCancelAll(ctx, c.tenant, w, fps, a.Now())
			if err != nil {
				return fail(err)
			}
			if replayed {
				headers = map[string]string{HeaderReplayed: "true"}
			}
			// On the actions it cancels, the key is the cancel-all's own
			// (scoped to this operation), so the same key sent to a cancel
			// of one of them is another call, and the reverse.
			bareKey, w.Key = w.Key, c.keys.KeyDigest(cancelAllKeyScope+r.rawKey)
		}
		ids, err := service.CancelUser(ctx, a.store, service.CancelAll{Tenant: c.tenant, UserID: userID, Kind: kind, Reason: req.Reason,
			Write: w, BareKey: bareKey, Fingerprints: fps, Now: a.Now(), Clock: a.Now})
		if err != nil {
			return fail(err)
		}
		if ids == nil {
			ids = []string{}
		}
		c.outcome = "canceled"
		if headers != nil {
			c.outcome = "replayed"
		}
		return respond(http.StatusOK, &CancelAllView{Canceled: len(ids), ActionIDs: ids}, headers), nil
	})
}

// pathUser reads and checks the {userId} path parameter.
func pathUser(ev *events.APIGatewayV2HTTPRequest) (string, error) {
	id := ev.PathParameters["userId"]
	return id, action.ValidateUserID(id)
}
