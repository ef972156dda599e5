package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
)

// View is the public JSON of an action.
type View struct {
	ActionID             string            `json:"actionId"`
	UserID               string            `json:"userId"`
	Kind                 string            `json:"kind,omitempty"`
	State                action.State      `json:"state"`
	ActiveAt             string            `json:"activeAt"`
	ExpiresAt            string            `json:"expiresAt"`
	CreatedAt            string            `json:"createdAt"`
	ConsumedAt           string            `json:"consumedAt,omitempty"`
	ConsumedReason       string            `json:"consumedReason,omitempty"`
	CanceledAt           string            `json:"canceledAt,omitempty"`
	CancelReason         string            `json:"cancelReason,omitempty"`
	ExpiredAt            string            `json:"expiredAt,omitempty"`
	Metadata             map[string]string `json:"metadata,omitempty"`
	PINProtected         bool              `json:"pinProtected"`
	PINAttemptsRemaining *int              `json:"pinAttemptsRemaining,omitempty"`
	LockedAt             string            `json:"lockedAt,omitempty"`
	// Multi-use actions only (absent on a single-use one): see uses.go.
	MaxUses       *int           `json:"maxUses,omitempty"`
	Releasable    bool           `json:"releasable,omitzero"`
	UsesHeld      *int           `json:"usesHeld,omitempty"`
	UsesRemaining *int           `json:"usesRemaining,omitempty"`
	UseID         string         `json:"useId,omitempty"` // a take's answer
	UsedAt        string         `json:"usedAt,omitempty"`
	Payload       jsontext.Value `json:"payload,omitzero"`
}

// view renders a as it reads at instant at. The payload is added by the
// caller, only for a successful consume.
func view(a *action.Action, at time.Time) *View {
	v := &View{
		ActionID: a.ID, UserID: a.UserID, Kind: a.Kind,
		State:          a.StateAt(at),
		ActiveAt:       store.FormatTime(a.ActiveAt),
		ExpiresAt:      store.FormatTime(a.ExpiresAt),
		CreatedAt:      store.FormatTime(a.CreatedAt),
		ConsumedAt:     optTime(a.ConsumedAt),
		ConsumedReason: a.ConsumedReason,
		CanceledAt:     optTime(a.CanceledAt),
		CancelReason:   a.CancelReason,
		ExpiredAt:      optTime(a.ExpiredAt),
		Metadata:       a.Metadata,
		PINProtected:   a.PINProtected(),
		LockedAt:       optTime(a.LockedAt),
	}
	if a.PINProtected() {
		n := a.PINAttemptsRemaining()
		v.PINAttemptsRemaining = &n
	}
	if a.MultiUse() {
		useCounts(v, a)
	}
	return v
}

// asCreated is a as its create call returned it: a create replay answers with
// the first response, not with what happened to the action since.
func asCreated(a *action.Action) *action.Action {
	c := *a
	c.ConsumedAt, c.ConsumedReason = time.Time{}, ""
	c.CanceledAt, c.CancelReason = time.Time{}, ""
	c.ExpiredAt, c.LockedAt = time.Time{}, time.Time{}
	c.PINFailures = 0
	c.UsesHeld = 0 // a multi-use action is created with none held
	return &c
}

// asConsumed is a as its consume answered it: guesses counted since (a
// reused key's comparison) left out, so a replay answers as the first.
func asConsumed(a *action.Action) *action.Action {
	c := *a
	if a.ConsumePINFailures != nil {
		c.PINFailures = *a.ConsumePINFailures
	}
	return &c
}

func optTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return store.FormatTime(t)
}

// errorBody is every error's JSON: code, message, context, requestId.
type errorBody struct {
	Error             action.Code `json:"error"`
	Message           string      `json:"message"`
	Field             string      `json:"field,omitempty"`
	ConsumedAt        string      `json:"consumedAt,omitempty"`
	CanceledAt        string      `json:"canceledAt,omitempty"`
	ExpiresAt         string      `json:"expiresAt,omitempty"`
	ActiveAt          string      `json:"activeAt,omitempty"`
	LockedAt          string      `json:"lockedAt,omitempty"`
	AttemptsRemaining *int        `json:"attemptsRemaining,omitempty"`
	MaxUses           *int        `json:"maxUses,omitempty"`
	RequestID         string      `json:"requestId"`
}

// Status is the HTTP status of each outcome code.
func Status(c action.Code) int {
	switch c {
	case action.CodeInvalidRequest:
		return http.StatusBadRequest
	case action.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case action.CodeNotFound, action.CodeUseNotFound:
		return http.StatusNotFound
	case action.CodeExists, action.CodeAlreadyUsed, action.CodeNotActive, action.CodeNoUsesLeft, action.CodeNotReleasable:
		return http.StatusConflict
	case action.CodeCanceled, action.CodeExpired:
		return http.StatusGone
	case action.CodeLocked:
		return http.StatusLocked
	case action.CodeInvalidPIN, action.CodePINRequired:
		return http.StatusForbidden
	case action.CodeKeyReused:
		return http.StatusUnprocessableEntity
	case action.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

var messages = map[action.Code]string{
	action.CodeTooLarge:    "the request body is larger than this route accepts (" + strconv.Itoa(MaxBodyBytes) + " bytes; " + strconv.Itoa(MaxKeyBodyBytes) + " for /keys/{key}/complete)",
	action.CodeNotFound:    "no action has this id",
	action.CodeExists:      "an action with this id already exists",
	action.CodeAlreadyUsed: "the action was already consumed",
	action.CodeCanceled:    "the action was canceled",
	action.CodeExpired:     "the action has expired",
	action.CodeNotActive:   "the action is not active yet",
	action.CodeLocked:      "too many wrong PINs: the action is locked",
	action.CodeInvalidPIN:  "the PIN is wrong",
	action.CodePINRequired: "this action is PIN-protected: send pin (no attempt was counted)",
	action.CodeKeyReused:   "this Idempotency-Key was used for this operation on this action with a different request body",
	action.CodeUnavailable: "the action store is unavailable; retry after the given delay",
	action.CodeInternal:    "internal error",

	action.CodeNoUsesLeft:    "no use is left for a new useId (every use is held, or the action's item is full)",
	action.CodeUseNotFound:   "this useId holds no use of the action",
	action.CodeNotReleasable: "the action's uses cannot be released (it was not created releasable)",
}

// rejection renders a domain rejection with the stable context of the action.
func rejection(r *action.Rejection, requestID string) events.APIGatewayV2HTTPResponse {
	body := errorBody{Error: r.Code, Message: messages[r.Code], RequestID: requestID}
	if a := r.Action; a != nil {
		switch r.Code {
		case action.CodeAlreadyUsed:
			body.ConsumedAt = optTime(a.ConsumedAt)
		case action.CodeCanceled:
			body.CanceledAt = optTime(a.CanceledAt)
		case action.CodeExpired:
			body.ExpiresAt = store.FormatTime(a.ExpiresAt)
		case action.CodeNotActive:
			body.ActiveAt = store.FormatTime(a.ActiveAt)
		case action.CodeLocked:
			body.LockedAt = optTime(a.LockedAt)
		case action.CodeInvalidPIN:
			n := a.PINAttemptsRemaining()
			body.AttemptsRemaining = &n
		case action.CodeKeyReused:
			// On a PIN action the comparison spent a guess: say what is left.
			if action.IsGuess(r) {
				n := a.PINAttemptsRemaining()
				body.AttemptsRemaining = &n
			}
		case action.CodePINRequired:
			body.Field = "pin"
		case action.CodeNoUsesLeft:
			body.MaxUses = &a.MaxUses
		}
	}
	return respond(Status(r.Code), body, nil)
}

// invalidRequest renders a 400 naming the field at fault.
func invalidRequest(e *action.InvalidError, requestID string) events.APIGatewayV2HTTPResponse {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + " " + e.Message
	}
	return respond(http.StatusBadRequest, errorBody{Error: action.CodeInvalidRequest, Message: msg, Field: e.Field, RequestID: requestID}, nil)
}

// errorResponse renders a code with its standard message.
func errorResponse(c action.Code, requestID string, headers map[string]string) events.APIGatewayV2HTTPResponse {
	return respond(Status(c), errorBody{Error: c, Message: messages[c], RequestID: requestID}, headers)
}

// respond encodes body as JSON, ending with a newline (so a terminal's
// prompt does not run into curl's output). Deterministic encoding keeps a
// replayed body byte-identical to the first one.
func respond(status int, body any, headers map[string]string) events.APIGatewayV2HTTPResponse {
	out, err := json.Marshal(body, json.Deterministic(true))
	if err != nil { // only a bug can get here: every body is a plain struct
		status, out = http.StatusInternalServerError, []byte(`{"error":"internal","message":"internal error"}`)
	}
	h := map[string]string{"Content-Type": "application/json"}
	for k, v := range headers {
		h[k] = v
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: h, Body: string(out) + "\n"}
}
