package client

import (
	"context"
	"encoding/json"
	"time"
)

// Action is an action as the API shows it.
type Action struct {
	ActionID             string            `json:"actionId"`
	UserID               string            `json:"userId"`
	Kind                 string            `json:"kind,omitempty"`
	State                string            `json:"state"` // pending, active, consumed, expired
	ActiveAt             time.Time         `json:"activeAt"`
	ExpiresAt            time.Time         `json:"expiresAt"`
	CreatedAt            time.Time         `json:"createdAt"`
	ConsumedAt           *time.Time        `json:"consumedAt,omitempty"`
	ConsumedReason       string            `json:"consumedReason,omitempty"`
	CanceledAt           *time.Time        `json:"canceledAt,omitempty"`
	CancelReason         string            `json:"cancelReason,omitempty"`
	ExpiredAt            *time.Time        `json:"expiredAt,omitempty"`
	Metadata             map[string]string `json:"metadata,omitempty"`
	PINProtected         bool              `json:"pinProtected"`
	PINAttemptsRemaining *int              `json:"pinAttemptsRemaining,omitempty"`
	LockedAt             *time.Time        `json:"lockedAt,omitempty"`
	// Multi-use actions only (see uses.go): the counts, and in a take's
	// answer the useId and when it took its use.
	MaxUses       *int       `json:"maxUses,omitempty"`
	Releasable    bool       `json:"releasable,omitempty"`
	UsesHeld      *int       `json:"usesHeld,omitempty"`
	UsesRemaining *int       `json:"usesRemaining,omitempty"`
	UseID         string     `json:"useId,omitempty"`
	UsedAt        *time.Time `json:"usedAt,omitempty"`
	// Payload is revealed only by a successful consume (and its replay).
	Payload json.RawMessage `json:"payload,omitempty"`
	// Replayed is set when the answer is the stored answer of an earlier
	// attempt of the same call (header Idempotent-Replayed).
	Replayed bool `json:"-"`
}

// CreateInput is the body of POST /actions. Zero times mean the defaults
// (active now, expiring 24 h after activeAt).
type CreateInput struct {
	ActionID       string            `json:"actionId,omitempty"`
	UserID         string            `json:"userId"`
	Kind           string            `json:"kind,omitempty"`
	ActiveAt       *time.Time        `json:"activeAt,omitempty"`
	ExpiresAt      *time.Time        `json:"expiresAt,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	PIN            string            `json:"pin,omitempty"`
	MaxPINAttempts int               `json:"maxPinAttempts,omitempty"`
	Payload        any               `json:"payload,omitempty"`
	// Supersede cancels the user's earlier open actions of the same kind
	// once this one is written (a "send me a new link").
	Supersede bool `json:"supersede,omitempty"`
	// MaxUses > 1 (at most 1000) or Releasable make a multi-use action:
	// each consume names its UseID (TakeUse). Not with PIN.
	MaxUses    int  `json:"maxUses,omitempty"`
	Releasable bool `json:"releasable,omitempty"`
}

// ConsumeInput is the body of POST /actions/{id}/consume.
type ConsumeInput struct {
	Reason string `json:"reason,omitempty"`
	PIN    string `json:"pin,omitempty"`
	// UseID names who takes a use of a multi-use action (see TakeUse).
	UseID string `json:"useId,omitempty"`
}

// CreateAction creates an action (201). Without ActionID the server derives
// the id from the call's Idempotency-Key, so a retried create still creates
// one action.
func (c *Client) CreateAction(ctx context.Context, in CreateInput) (*Action, error) {
	return postFor[Action](ctx, c, "/actions", in)
}

// GetAction reads an action (never its payload).
func (c *Client) GetAction(ctx context.Context, id string) (*Action, error) {
	return getFor[Action](ctx, c, "/actions/"+seg(id))
}

// Consume consumes an action exactly once. A retry after a lost answer gets
// the same 200 (Replayed set), not ErrAlreadyUsed.
func (c *Client) Consume(ctx context.Context, id string, in ConsumeInput) (*Action, error) {
	return postFor[Action](ctx, c, "/actions/"+seg(id)+"/consume", in)
}

// Cancel cancels an open action; canceling again answers the first
// cancellation.
func (c *Client) Cancel(ctx context.Context, id, reason string) (*Action, error) {
	return postFor[Action](ctx, c, "/actions/"+seg(id)+"/cancel", struct {
		Reason string `json:"reason,omitempty"`
	}{reason})
}

func (a *Action) setReplayed(r bool) { a.Replayed = r }
