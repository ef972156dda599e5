package publish

import (
	"encoding/json"
	"time"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/tenant"
)

// useChanged returns the event of a multi-use action's write that took or
// released one use (each such write changes exactly one use), or nil.
func useChanged(old, cur *action.Action) (*Entry, error) {
	for id, u := range cur.Uses {
		was, had := old.Uses[id]
		switch {
		case u.Held() && (!had || !was.Held() || !was.At.Equal(u.At)):
			return used(cur, id, u)
		case !u.Held() && had && was.Held():
			return useReleased(cur, id, u)
		}
	}
	return nil, nil
}

func used(a *action.Action, id string, u action.Use) (*Entry, error) {
	c := useCommon(events.TypeUsed, a, id, u, u.At)
	return useEntry(events.TypeUsed, c, &events.Used{
		Common: c, UseID: id, UsedAt: store.FormatTime(u.At), UsesHeld: u.N, MaxUses: a.MaxUses, Reason: u.Reason,
	})
}

func useReleased(a *action.Action, id string, u action.Use) (*Entry, error) {
	c := useCommon(events.TypeUseReleased, a, id, u, u.ReleasedAt)
	return useEntry(events.TypeUseReleased, c, &events.UseReleased{
		Common: c, UseID: id, UsedAt: store.FormatTime(u.At), ReleasedAt: store.FormatTime(u.ReleasedAt),
	})
}

// useCommon is common with the use's own event id.
func useCommon(detailType string, a *action.Action, id string, u action.Use, at time.Time) events.Common {
	c := common(detailType, a, at)
	c.EventID = useEventID(detailType, a, id, u)
	return c
}

func useEntry(detailType string, c events.Common, detail any) (*Entry, error) {
	b, err := json.Marshal(detail)
	if err != nil {
		return nil, err
	}
	return &Entry{DetailType: detailType, EventID: c.EventID, Detail: b}, nil
}

// useEventID names one use by its action, its useId and when it was
// taken: a useId taking a use again after a release is a new take (a new
// id); the release of that take has its own.
func useEventID(detailType string, a *action.Action, id string, u action.Use) string {
	return events.EventID(detailType, tenant.ItemKey(a.Tenant, a.ID),
		store.FormatTime(a.CreatedAt)+"\x00"+id+"\x00"+store.FormatTime(u.At))
}
