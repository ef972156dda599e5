package client

import (
	"context"
	"net/url"
	"strconv"
	"time"
)

// UseRelease answers a release: which use, taken when, released when.
type UseRelease struct {
	ActionID   string    `json:"actionId"`
	UseID      string    `json:"useId"`
	UsedAt     time.Time `json:"usedAt"`
	ReleasedAt time.Time `json:"releasedAt"`
	Replayed   bool      `json:"-"`
}

func (r *UseRelease) setReplayed(b bool) { r.Replayed = b }

// Use is one held use.
type Use struct {
	UseID  string    `json:"useId"`
	UsedAt time.Time `json:"usedAt"`
}

// UsePage is one page of an action's held uses (by capacity shard, in
// useId order within one: an action of up to 24 uses lists in useId
// order); Cursor, opaque, is "" on the last page.
type UsePage struct {
	Uses   []Use  `json:"uses"`
	Cursor string `json:"cursor,omitempty"`
}

// TakeUse takes one use of a multi-use action for useID (a device, a
// customer, an order). The same useID again answers its first take (same
// UsedAt), never a second use; when every use is held a new useID gets
// ErrNoUsesLeft. The answer has MaxUses but no UsesHeld (GetAction has
// the count).
func (c *Client) TakeUse(ctx context.Context, id, useID, reason string) (*Action, error) {
	return c.Consume(ctx, id, ConsumeInput{UseID: useID, Reason: reason})
}

// ReleaseUse gives useID's use of a releasable action back. The call is
// retried under its one Idempotency-Key, so a retry answers the first
// release (Replayed); a new call for a useID that holds no use (never
// taken, or released already) is ErrUseNotFound. ErrNotReleasable.
func (c *Client) ReleaseUse(ctx context.Context, id, useID string) (*UseRelease, error) {
	return postFor[UseRelease](ctx, c, "/actions/"+seg(id)+"/uses/"+seg(useID)+"/release", struct{}{})
}

// ListUses reads one page of an action's held uses (limit 0: the server's
// page size; cursor "": the first page).
func (c *Client) ListUses(ctx context.Context, id, cursor string, limit int) (*UsePage, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/actions/" + seg(id) + "/uses"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return getFor[UsePage](ctx, c, path)
}
