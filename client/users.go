package client

import (
	"context"
	"net/url"
	"strconv"
)

// ListOptions filter and page a user's actions; zero values mean any kind,
// any state, the server's default page size, the first page.
type ListOptions struct {
	Kind   string
	State  string // pending, active, consumed or expired
	Limit  int    // 1..100
	Cursor string // Page.Cursor of the previous page
}

// Page is one page of a user's actions, newest first; Cursor is "" on the
// last page.
type Page struct {
	Actions []Action `json:"actions"`
	Cursor  string   `json:"cursor,omitempty"`
}

// CancelAllInput is the body of POST /users/{userId}/actions/cancel.
type CancelAllInput struct {
	Kind   string `json:"kind,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// CancelAllResult is what a cancel-all canceled.
type CancelAllResult struct {
	Canceled  int      `json:"canceled"`
	ActionIDs []string `json:"actionIds"`
	Replayed  bool     `json:"-"`
}

func (r *CancelAllResult) setReplayed(b bool) { r.Replayed = b }

// ListUserActions reads one page of a user's actions (never a payload).
func (c *Client) ListUserActions(ctx context.Context, userID string, o ListOptions) (*Page, error) {
	q := url.Values{}
	for k, v := range map[string]string{"kind": o.Kind, "state": o.State, "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	path := "/users/" + seg(userID) + "/actions"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return getFor[Page](ctx, c, path)
}

// CancelUserActions cancels every open action of a user (of one kind), as
// one logical call: its retries carry the same Idempotency-Key and answer
// with the same canceled actions.
func (c *Client) CancelUserActions(ctx context.Context, userID string, in CancelAllInput) (*CancelAllResult, error) {
	return postFor[CancelAllResult](ctx, c, "/users/"+seg(userID)+"/actions/cancel", in)
}
