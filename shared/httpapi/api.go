// Package httpapi maps API Gateway HTTP API (payload 2.0) events to the
// action store and back. Each exported method is one Lambda handler; the
// local server calls the very same methods.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/secretkeys"
	"github.com/exactonce/exactonce/shared/service"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/telemetry"
	"github.com/exactonce/exactonce/shared/tenant"
)

// Route keys, as API Gateway names them.
const (
	RouteCreate  = "POST /actions"
	RouteGet     = "GET /actions/{actionId}"
	RouteConsume = "POST /actions/{actionId}/consume"
	RouteCancel  = "POST /actions/{actionId}/cancel"
)

// HeaderReplayed marks a response replayed for a retried Idempotency-Key.
const HeaderReplayed = "Idempotent-Replayed"

// API serves the action routes.
type API struct {
	store *store.Store
	keys  *secretkeys.Provider // nil for a function without the secret (GET /actions/{id})
	log   *slog.Logger
	// Now is the clock; tests may replace it.
	Now func() time.Time
	// Metrics receives each request's outcome and latency (nil: none).
	Metrics *telemetry.Metrics
	// Tenants maps callers to tenants (nil: everyone is tenant.Default);
	// TenantClaim is the JWT claim matched against it (DefaultTenantClaim).
	Tenants     *tenant.Map
	TenantClaim string
}

// New returns an API over st, sealing and hashing with the keys of keys (nil
// for a function that has no access to the secret), logging one JSON line
// per request to log.
func New(st *store.Store, keys *secretkeys.Provider, log *slog.Logger) *API {
	return &API{store: st, keys: keys, log: log, Now: time.Now}
}

// Handler is the signature of every route handler.
type Handler func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Routes returns every route key with its handler.
func (a *API) Routes() map[string]Handler {
	return map[string]Handler{
		RouteCreate: a.Create, RouteGet: a.Get, RouteConsume: a.Consume, RouteCancel: a.Cancel,
		RouteKeyClaim: a.Claim, RouteKeyComplete: a.Complete, RouteKeyRelease: a.Release, RouteKeyGet: a.GetKey,
		RouteUserList: a.ListUser, RouteUserCancel: a.CancelUser,
		RouteUseRelease: a.ReleaseUse, RouteUseList: a.ListUses,
	}
}

// Create handles POST /actions.
func (a *API) Create(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteCreate, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		var req action.CreateRequest
		r, err := readRequest(&ev, c.keys, false, MaxBodyBytes, &req)
		if err != nil {
			return fail(err)
		}
		if err := r.noEmpty("actionId", "kind", "activeAt", "expiresAt", "pin"); err != nil {
			return fail(err)
		}
		if req.Supersede {
			// It cancels the user's earlier actions of the kind: a JWT caller
			// needs the cancel routes' scope too.
			if err := needScope(&ev, routeScopes[RouteCancel]); err != nil {
				return fail(err)
			}
		}
		act, err := action.ValidateCreate(&req, a.Now())
		if action.TooLateToCreate(err) && r.key != "" {
			// Too late to write, but perhaps the retry of a create that was
			// written in time: that one replays its 201.
			return a.replayCreate(ctx, c, r, a.createID(c, r, req.ActionID), err)
		}
		if err != nil {
			return fail(err)
		}
		act.Tenant, act.ID = c.tenant, a.createID(c, r, req.ActionID)
		c.actionID = act.ID
		// PIN and payload are bound to the item's key (for the default
		// tenant, the id): another tenant's item of the same id cannot use them.
		bound := tenant.ItemKey(act.Tenant, act.ID)
		if req.PIN != "" {
			act.PINHash = c.keys.PINHash(bound, req.PIN)
		}
		if req.Payload != nil {
			act.Payload = c.keys.Seal(bound, req.Payload)
		}
		if act.PINProtected() || act.Payload != nil {
			act.KeyID = c.keys.KeyID()
		}
		act.Create = r.write(c.requestID)
		act.Supersedes = req.Supersede

		created, err := service.Create(ctx, a.store, act, r.fingerprints, a.Now)
		var replay *action.Replay
		switch {
		case errors.As(err, &replay):
			created = replay.Action
		case err != nil:
			return fail(err)
		}
		if req.Supersede {
			// After the write, and on every retry of it: the user's earlier open
			// actions of this kind are canceled (idempotent; a dependency fault
			// is a 503 the caller retries with its key).
			// A re-send is another request with the key; the SDK re-sending
			// this request's own write (its answer lost) is the first attempt.
			resent := replay != nil && replay.Action.Create.RequestID != c.requestID
			if _, err := service.Supersede(ctx, a.store, created, c.requestID, resent, a.Now); err != nil {
				return fail(err)
			}
		}
		if replay != nil {
			return a.createReplayed(c, r, replay.Action)
		}
		c.outcome = "created"
		return respond(http.StatusCreated, view(created, created.CreatedAt), nil), nil
	})
}

// createID is the id of a new action: the caller's, else derived from the
// Idempotency-Key (a retry lands on the same item), else random. A derived
// id is bound to the tenant too (the default tenant's as it always was), so
// one tenant cannot work out another's id from a guessable key.
func (a *API) createID(c *call, r *request, chosen string) string {
	switch {
	case chosen != "":
		return chosen
	case r.rawKey != "" && c.tenant == tenant.Default:
		return action.IDFromDigest(c.keys.IdentDigest(r.rawKey))
	case r.rawKey != "":
		return action.IDFromDigest(c.keys.IdentDigest(c.tenant + "\x00" + r.rawKey)) // keys are printable: no \x00
	}
	return action.NewID()
}

// replayCreate answers a keyed create whose expiresAt has passed: the 201 of
// the create it retries, else the validation error invalid.
func (a *API) replayCreate(ctx context.Context, c *call, r *request, id string, invalid error) (events.APIGatewayV2HTTPResponse, error) {
	c.actionID = id
	err := service.FindCreate(ctx, a.store, c.tenant, id, r.write(c.requestID), r.fingerprints, a.Now)
	var replay *action.Replay
	var rej *action.Rejection
	switch {
	case errors.As(err, &replay):
		return a.createReplayed(c, r, replay.Action)
	case err == nil, errors.As(err, &rej) && rej.Code == action.CodeExists:
		return fail(invalid)
	}
	return fail(err)
}

func (a *API) createReplayed(c *call, r *request, old *action.Action) (events.APIGatewayV2HTTPResponse, error) {
	c.outcome = "replayed"
	return respond(http.StatusCreated, view(asCreated(old), old.CreatedAt), replayHeader(old.Create, r)), nil
}

// Get handles GET /actions/{actionId}. It never returns the payload.
func (a *API) Get(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteGet, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		id, err := pathID(&ev, c)
		if err != nil {
			return fail(err)
		}
		act, err := a.store.Get(ctx, c.tenant, id)
		if err != nil {
			return fail(err)
		}
		c.outcome = "ok"
		return respond(http.StatusOK, view(act, a.Now()), nil), nil
	})
}

// Consume handles POST /actions/{actionId}/consume.
func (a *API) Consume(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteConsume, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		id, err := pathID(&ev, c)
		if err != nil {
			return fail(err)
		}
		var req action.ConsumeRequest
		r, err := readRequest(&ev, c.keys, true, MaxBodyBytes, &req)
		if err != nil {
			return fail(err)
		}
		if err := r.noEmpty("useId"); err != nil { // a consume's "pin":"" is no PIN (documented)
			return fail(err)
		}
		if err := action.ValidateConsume(&req); err != nil {
			return fail(err)
		}
		if req.UseID != "" {
			return a.take(ctx, c, id, &req, r)
		}
		act, err := a.consume(ctx, c, id, &req, r)
		var headers map[string]string
		var replay *action.Replay
		switch {
		case errors.As(err, &replay):
			act, headers, c.outcome = asConsumed(replay.Action), replayHeader(replay.Action.Consume, r), "replayed"
		case err != nil:
			return fail(err)
		default:
			c.outcome = "consumed"
		}
		return consumed(c, act, view(act, act.ConsumedAt), headers)
	})
}

func (a *API) consume(ctx context.Context, c *call, id string, req *action.ConsumeRequest, r *request) (*action.Action, error) {
	cons := service.ConsumeRequest{
		Tenant: c.tenant, Reason: req.Reason, Write: r.write(c.requestID), Fingerprints: r.fingerprints,
		KeyIDs: c.keys.KeyIDs(), Now: a.Now(), Clock: a.Now,
	}
	if req.PIN != "" {
		keys, pin := c.keys, req.PIN
		cons.PIN = func(act *action.Action) bool {
			return keys.PINMatches(act.KeyID, act.PINHash, tenant.ItemKey(act.Tenant, act.ID), pin)
		}
	}
	return service.Consume(ctx, a.store, id, cons)
}

// open decrypts a consumed action's payload; one sealed under a key set
// these keys do not hold is an *action.UnknownKeyError (serve learns it).
func open(keys *secretkeys.Keys, act *action.Action) ([]byte, error) {
	if id := secretkeys.SealedKeyID(act.Payload); !keys.Knows(id) {
		return nil, &action.UnknownKeyError{KeyID: id}
	}
	return keys.Open(tenant.ItemKey(act.Tenant, act.ID), act.Payload)
}

// Cancel handles POST /actions/{actionId}/cancel. Canceling again answers
// 200 with the first cancellation.
func (a *API) Cancel(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, RouteCancel, &ev, func(ctx context.Context, c *call) (events.APIGatewayV2HTTPResponse, error) {
		id, err := pathID(&ev, c)
		if err != nil {
			return fail(err)
		}
		var req action.CancelRequest
		r, err := readRequest(&ev, c.keys, true, MaxBodyBytes, &req)
		if err != nil {
			return fail(err)
		}
		if err := action.ValidateCancel(&req); err != nil {
			return fail(err)
		}
		act, err := a.store.Cancel(ctx, id, store.Cancel{
			Tenant: c.tenant, Reason: req.Reason, Write: r.write(c.requestID), Fingerprints: r.fingerprints, Now: a.Now(),
		})
		var headers map[string]string
		var replay *action.Replay
		switch {
		case errors.As(err, &replay):
			act, headers, c.outcome = replay.Action, replayHeader(replay.Action.Cancel, r), "already_canceled"
		case err != nil:
			return fail(err)
		default:
			c.outcome = "canceled"
		}
		return respond(http.StatusOK, view(act, act.CanceledAt), headers), nil
	})
}

// call is the per-request state the log line reports.
type call struct {
	tenant    string           // the caller's tenant: every item it reaches is in its key space
	keys      *secretkeys.Keys // this request's keys (nil without the secret)
	requestID string
	actionID  string
	keyHash   string // keyed hash of the {key} path parameter; never the key
	outcome   string
}

// errSecretBehind: an item is under a key set the server secret does not
// hold (yet): a rotation half done. Answered 503, nothing written.
var errSecretBehind = errors.New("server secret is behind the data")

// failure carries an error out of a route body to serve, which renders it.
type failure struct{ err error }

func (f *failure) Error() string { return f.err.Error() }

func fail(err error) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{}, &failure{err}
}

// serve runs one route: it renders failures as the contract's error bodies
// and writes one JSON log line. It never returns an error to Lambda (which
// would turn into an opaque 500).
func (a *API) serve(ctx context.Context, route string, ev *events.APIGatewayV2HTTPRequest,
	body func(context.Context, *call) (events.APIGatewayV2HTTPResponse, error)) (events.APIGatewayV2HTTPResponse, error) {
	start := time.Now()
	cold := telemetry.ColdStart()
	ctx, usage := telemetry.WithUsage(ctx)
	c := &call{requestID: ev.RequestContext.RequestID}
	if a.keys != nil {
		c.keys = a.keys.Keys(ctx)
	}
	if c.requestID == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		c.requestID = hex.EncodeToString(b)
	}
	var resp events.APIGatewayV2HTTPResponse
	var err error
	if c.tenant, err = a.tenantOf(route, ev); err == nil {
		resp, err = body(ctx, c)
	}
	if f := (*failure)(nil); errors.As(err, &f) {
		err = f.err
	}
	if unknown := (*action.UnknownKeyError)(nil); errors.As(err, &unknown) && a.keys != nil {
		// A record under a key set these keys lack (a function rotated
		// first): nothing was judged or written. Learn the secret (bounded by
		// the provider) and run the request once more; else 503.
		if keys, ok := a.keys.Learn(ctx, unknown.KeyID); ok {
			c.keys = keys
			resp, err = body(ctx, c)
			if f := (*failure)(nil); errors.As(err, &f) {
				err = f.err
			}
		}
		if errors.As(err, &unknown) {
			err = fmt.Errorf("%w: the server secret does not hold key set %s", errSecretBehind, unknown.KeyID)
		}
	}
	if err != nil {
		resp = a.render(ctx, err, c)
	}
	latency := float64(time.Since(start).Microseconds()) / 1000
	attrs := []slog.Attr{
		slog.String("requestId", c.requestID),
		slog.String("route", route),
		slog.Int("status", resp.StatusCode),
		slog.String("outcome", c.outcome),
		slog.Float64("latencyMs", latency),
		slog.Int64("dynamodbRequests", usage.Requests()),
		slog.Float64("writeUnits", usage.WriteUnits()),
		slog.Int64("failedWrites", usage.FailedWrites()),
		slog.Bool("coldStart", cold),
	}
	if c.actionID != "" {
		attrs = append(attrs, slog.String("actionId", c.actionID))
	}
	if c.tenant != tenant.Default {
		attrs = append(attrs, slog.String("tenant", c.tenant))
	}
	if c.keyHash != "" {
		attrs = append(attrs, slog.String("keyHash", c.keyHash))
	}
	if k, err := parseKey(headerOr(ev, "idempotency-key")); err == nil && c.keys != nil {
		// Never the key itself: a short keyed hash still correlates retries.
		attrs = append(attrs, slog.String("idempotencyKeyHash", c.keys.LogHash(k)))
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
	a.Metrics.Emit([]telemetry.Dim{{Name: "Route", Value: route}, {Name: "Outcome", Value: c.outcome}},
		telemetry.Value{Name: "Requests", Unit: telemetry.Count, Value: 1},
		telemetry.Value{Name: "Latency", Unit: telemetry.Milliseconds, Value: latency})
	return resp, nil
}

// render maps an error to its response. Dependency faults say only that a
// dependency failed; the detail goes to the log, never to the caller.
func (a *API) render(ctx context.Context, err error, c *call) events.APIGatewayV2HTTPResponse {
	var invalid *action.InvalidError
	var rej *action.Rejection
	var keyRej *idempotency.Rejection
	var forbidden *errForbidden
	var running *store.InProgressError
	switch {
	case errors.As(err, &forbidden):
		c.outcome = string(action.CodeForbidden)
		return respond(http.StatusForbidden, errorBody{Error: action.CodeForbidden, Message: forbidden.why, RequestID: c.requestID}, nil)
	case errors.As(err, &keyRej):
		c.outcome = string(keyRej.Code)
		return keyRejection(keyRej, c.requestID, a.Now())
	case errors.As(err, &invalid):
		c.outcome = string(action.CodeInvalidRequest)
		return invalidRequest(invalid, c.requestID)
	case errors.Is(err, errTooLarge):
		c.outcome = string(action.CodeTooLarge)
		return errorResponse(action.CodeTooLarge, c.requestID, nil)
	case errors.As(err, &rej) && rej.Code != action.CodeInternal:
		c.outcome = string(rej.Code)
		resp := rejection(rej, c.requestID)
		if errors.As(err, new(*store.ReplayedError)) {
			// A keyed call re-sent: its first answer, again.
			resp.Headers[HeaderReplayed] = "true"
		}
		return resp
	case errors.As(err, &running):
		// A keyed take re-sent while its first attempt runs: that attempt
		// answers; the re-send, retried, gets its answer.
		c.outcome = string(idempotency.CodeInProgress)
		return respond(http.StatusConflict, keyErrorBody{Error: idempotency.CodeInProgress, Message: messageRunning,
			LeaseExpiresAt: store.FormatTime(running.Until), RequestID: c.requestID}, map[string]string{"Retry-After": "1"})
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, errSecretBehind):
		c.outcome = string(action.CodeUnavailable)
		a.log.LogAttrs(ctx, slog.LevelWarn, "dependency unavailable", slog.String("requestId", c.requestID), slog.String("error", err.Error()))
		return errorResponse(action.CodeUnavailable, c.requestID, map[string]string{"Retry-After": "1"})
	}
	c.outcome = string(action.CodeInternal)
	a.log.LogAttrs(ctx, slog.LevelError, "internal error", slog.String("requestId", c.requestID), slog.String("error", err.Error()))
	return errorResponse(action.CodeInternal, c.requestID, nil)
}

// messageRunning is the message of a keyed call re-sent while its first
// attempt runs.
const messageRunning = "an earlier request with this Idempotency-Key is still running; retry after the given delay"

// pathID reads and checks the {actionId} path parameter.
func pathID(ev *events.APIGatewayV2HTTPRequest, c *call) (string, error) {
	id := ev.PathParameters["actionId"]
	if err := action.ValidateID("actionId", id); err != nil {
		return "", err
	}
	c.actionID = id
	return id, nil
}

// replayHeader marks a response as replayed when the request carries the
// Idempotency-Key and body of the call that performed the operation.
func replayHeader(w action.Write, r *request) map[string]string {
	if action.IsReplayOf(w, r.key, r.fingerprints) {
		return map[string]string{HeaderReplayed: "true"}
	}
	return nil
}
