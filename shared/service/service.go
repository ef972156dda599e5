// Package service holds the rules of the API that span more than one
// write of the store: a user's cancel-all (every open action, each by its
// own conditional write), supersede (the pointer that orders superseding
// creates, then the cancels it calls for) and the PIN-guess budget (a
// guess reserved before it is compared, then consumed or counted). The
// HTTP layer calls it; the store only stores.
package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
)

// CancelAll is a request to cancel every open action of a user.
type CancelAll struct {
	Tenant, UserID string
	Kind           string // "" for every kind, unless ExactKind
	ExactKind      bool   // Kind "" means the actions without a kind

	Reason string
	// Write is the call's: its key is the cancel-all's own, scoped to the
	// operation, so a cancel of one action with the same key is another
	// call (and the reverse).
	Write action.Write
	// BareKey is the key's unscoped digest, as cancel-alls stored it on
	// the actions they canceled before keys were scoped: a retry of such a
	// call still recognises them (its fingerprint names the route, so no
	// cancel of one action matches).
	BareKey      string
	Fingerprints []string
	Now          time.Time // the request's time: which actions are still open
	// Clock is read for each cancel's own time (canceledAt), which comes
	// after the reads however long they took; nil: Now.
	Clock func() time.Time
	// Except, when set, spares this action and everything created after it
	// (a superseding create cancels only what came before it).
	Except *action.Action
	// Also, when set, is an action to cancel whatever its time (the one a
	// superseding create's pointer write replaced): read with the others
	// when it is among them (no write when it is finished), else canceled
	// directly.
	Also string
}

// cancelParallel is how many cancels of one call are in flight at once.
const cancelParallel = 8

// CancelUser cancels every open action of a user (of one kind), each with
// its own conditional write, so a consume racing it either won (the action
// stays consumed) or lost (it is canceled), never both. It returns the ids
// this call canceled, including those a retry of the same keyed call finds
// canceled by itself. Costs: a Query per 100 actions of the user, a
// BatchGetItem per 100, and one UpdateItem per open action.
func CancelUser(ctx context.Context, st *store.Store, c CancelAll) ([]string, error) {
	var notAfter time.Time
	if c.Except != nil {
		notAfter = c.Except.CreatedAt
	}
	// Read everything first: a keyed call is judged against what its key
	// already did before anything is written.
	all, err := st.UserActions(ctx, c.Tenant, c.UserID, notAfter)
	if err != nil {
		return nil, err
	}
	var canceled []string
	var todo []*action.Action
	at := action.Attempt{Key: c.Write.Key, Fingerprints: c.Fingerprints, RequestID: c.Write.RequestID}
	alsoRead := false
	for _, a := range all {
		if a == nil {
			continue
		}
		if c.Also != "" && a.ID == c.Also {
			alsoRead = true
			if !a.Finished() && c.Now.Before(a.ExpiresAt) {
				todo = append(todo, a)
			}
			continue
		}
		if !a.CanceledAt.IsZero() && c.Write.Key != "" && a.Cancel.Key == c.Write.Key {
			// Canceled under this call's key: by this call (a retry: answer
			// it again), or by another body under the same key (422).
			why := action.ClassifyCancel(a, at)
			if _, ok := why.(*action.Replay); !ok {
				return nil, why
			}
			canceled = append(canceled, a.ID)
			continue
		}
		if !a.CanceledAt.IsZero() && action.IsReplayOf(a.Cancel, c.BareKey, c.Fingerprints) {
			canceled = append(canceled, a.ID) // by this call, before keys were scoped
			continue
		}
		if (c.Kind != "" || c.ExactKind) && a.Kind != c.Kind || c.Except != nil && !supersededBy(a, c.Except) {
			continue
		}
		if !a.Finished() && c.Now.Before(a.ExpiresAt) {
			todo = append(todo, a)
		}
	}
	if c.Also != "" && !alsoRead {
		todo = append(todo, &action.Action{ID: c.Also})
	}
	ids, err := cancelEach(ctx, st, todo, c)
	canceled = append(canceled, ids...)
	slices.Sort(canceled) // the same answer however a retry found them
	return canceled, err
}

// supersededBy reports whether the superseding create b cancels a by time:
// a plain action created before it, or a superseding one created more than
// action.MaxClockSkew before it (closer ones are ordered by the pointer, which
// cancels each action it moves away from).
func supersededBy(a, b *action.Action) bool {
	if a.Supersedes {
		return a.CreatedAt.Before(b.CreatedAt.Add(-action.MaxClockSkew))
	}
	return before(a, b)
}

// before reports whether a was created before b (ties broken by id).
func before(a, b *action.Action) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.ID < b.ID
}

// cancelEach cancels the actions, cancelParallel at a time; it returns the
// ids it canceled and the first dependency error.
func cancelEach(ctx context.Context, st *store.Store, todo []*action.Action, c CancelAll) ([]string, error) {
	var mu sync.Mutex
	var ids []string
	var firstErr error
	sem := make(chan struct{}, cancelParallel)
	var wg sync.WaitGroup
	for _, a := range todo {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			now := c.Now
			if c.Clock != nil {
				now = c.Clock()
			}
			_, err := st.Cancel(ctx, a.ID, store.Cancel{Tenant: c.Tenant, Reason: c.Reason, Write: c.Write, Fingerprints: c.Fingerprints, Now: now, NoCount: true})
			var replay *action.Replay
			var rej *action.Rejection
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ids = append(ids, a.ID)
			case errors.As(err, &replay):
				// Canceled by this call: under its key, or by its own write
				// the SDK re-sent after the answer was lost (its request id
				// and body), which an unkeyed call has no key to tell by.
				if action.IsReplayOf(replay.Action.Cancel, c.Write.Key, c.Fingerprints) || ownWrite(replay.Action.Cancel, c.Write) {
					ids = append(ids, a.ID)
				}
			case errors.As(err, &rej): // consumed or expired meanwhile: it won
			case firstErr == nil:
				firstErr = err
			}
		})
	}
	wg.Wait()
	slices.Sort(ids)
	return ids, firstErr
}

// ownWrite reports whether w, the write that canceled an action, is this
// call's own: the same request id and the same body (a request id alone
// proves nothing).
func ownWrite(w, mine action.Write) bool {
	return mine.RequestID != "" && w.RequestID == mine.RequestID && w.Fingerprint == mine.Fingerprint
}

// Supersede makes a (just created, or its create replayed) the user's one
// open action of its kind: every open action of that user and kind created
// before a is canceled with reason "superseded", each by its own
// conditional write, so a consume that already won keeps its win.
//
// The user index is eventually consistent, so two superseding creates a
// moment apart might not see each other there, and the clocks of two
// instances may disagree (by up to action.MaxClockSkew). The store's
// pointer item settles it (store.MoveSupersedePointer): one conditional
// write moves it to the newer of the two and names the action it named
// before, which is canceled; a create whose write fails cancels itself. So
// at most one of concurrent superseding creates stays open. resent says
// a's create was re-sent (with its key) after a first attempt wrote it;
// clock stamps each cancel when it is written. It returns the ids it
// canceled (a itself among them when a newer one had already superseded it).
//
// A re-send cannot tell a newer create from one its own first attempt
// still has to take the pointer from: while that attempt may still run
// (attemptPatience after a's creation) and a is open, only the first
// attempt moves the pointer to a (so its order is the real one); a
// re-send that finds the pointer not yet a's cancels nothing and answers
// ErrUnavailable, and the client's next re-send finds out.
func Supersede(ctx context.Context, st *store.Store, a *action.Action, requestID string, resent bool, clock func() time.Time) ([]string, error) {
	now := clock()
	settling := resent && !a.Finished() && now.Sub(a.CreatedAt) < attemptPatience
	replaced, superseded, err := st.MoveSupersedePointer(ctx, a, resent, settling)
	write := action.Write{RequestID: requestID}
	switch {
	case err != nil:
		return nil, err
	case superseded && settling:
		return nil, fmt.Errorf("%w: a superseding create's first attempt may still be settling its pointer", store.ErrUnavailable)
	case superseded: // a later superseding create holds the pointer: a is superseded
		return cancelEach(ctx, st, []*action.Action{{ID: a.ID}}, CancelAll{Tenant: a.Tenant, Reason: ReasonSuperseded, Write: write, Now: now, Clock: clock})
	}
	return CancelUser(ctx, st, CancelAll{Tenant: a.Tenant, UserID: a.UserID, Kind: a.Kind, ExactKind: true, Reason: ReasonSuperseded,
		Write: write, Now: now, Clock: clock, Except: a, Also: replaced})
}

// attemptPatience bounds how long a create's first attempt may still be
// running: an API function lives at most its timeout (10 s).
const attemptPatience = 30 * time.Second

// ReasonSuperseded is the cancelReason of an action a newer one superseded.
const ReasonSuperseded = "superseded"
