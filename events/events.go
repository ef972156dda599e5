// Package events is ExactOnce's public event contract: the detail of every
// event published to EventBridge, a parser for subscribers, and an
// idempotent-consumer helper (package events/once). Delivery is at-least-once; the
// eventId is deterministic, so subscribers de-duplicate on it.
package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	lambdaevents "github.com/aws/aws-lambda-go/events"
)

// Version of the detail schema. Parse rejects any other.
const Version = "1"

// DefaultSource is the "source" ExactOnce publishes with unless the stack's
// exactonce:eventSource says otherwise.
const DefaultSource = "exactonce"

// Detail types (EventBridge "detail-type").
const (
	TypeConsumed = "action.consumed"
	TypeCanceled = "action.canceled"
	TypeExpired  = "action.expired"
	// A multi-use action (maxUses > 1 or releasable) reports each use
	// taken and each use released; it is never action.consumed.
	TypeUsed        = "action.used"
	TypeUseReleased = "action.use_released"
)

// Types lists every detail type ExactOnce publishes.
var Types = []string{TypeConsumed, TypeCanceled, TypeExpired, TypeUsed, TypeUseReleased}

// Common is in every event's detail.
type Common struct {
	Version    string            `json:"version"`
	EventID    string            `json:"eventId"`
	Tenant     string            `json:"tenant,omitempty"` // the owning tenant; absent for the default tenant
	ActionID   string            `json:"actionId"`
	UserID     string            `json:"userId"`
	Kind       string            `json:"kind,omitempty"`
	OccurredAt string            `json:"occurredAt"` // RFC 3339, ms
	Metadata   map[string]string `json:"metadata,omitempty"`
}

// Consumed is the detail of action.consumed.
type Consumed struct {
	Common
	ConsumedAt string `json:"consumedAt"`
	Reason     string `json:"reason,omitempty"`
}

// Canceled is the detail of action.canceled.
type Canceled struct {
	Common
	CanceledAt string `json:"canceledAt"`
	Reason     string `json:"reason,omitempty"`
}

// Expired is the detail of action.expired. DetectedBy is "sweep" when the
// expiry sweep marked it, "ttl" when DynamoDB TTL deleted it unfinished.
type Expired struct {
	Common
	ExpiresAt  string `json:"expiresAt"`
	DetectedBy string `json:"detectedBy"`
}

// Used is the detail of action.used: the useId took one use. A useId
// that takes a use again after a release is a new transition (new eventId).
type Used struct {
	Common
	UseID  string `json:"useId"`
	UsedAt string `json:"usedAt"`
	// UsesHeld is no longer sent (0): an action's uses are spread over
	// several items, so no write knows the total; GET /actions/{id} has it.
	//
	// Deprecated: read usesHeld from GET /actions/{actionId}.
	UsesHeld int    `json:"usesHeld,omitempty"`
	MaxUses  int    `json:"maxUses"`
	Reason   string `json:"reason,omitempty"`
}

// UseReleased is the detail of action.use_released.
type UseReleased struct {
	Common
	UseID      string `json:"useId"`
	UsedAt     string `json:"usedAt"` // when the released use was taken
	ReleasedAt string `json:"releasedAt"`
}

// EventID is the deterministic id of one transition of one action: the same
// however often, and by whichever path, the transition is published.
// createdAt tells apart two actions that reused an id after retention.
func EventID(detailType, actionID, createdAt string) string {
	sum := sha256.Sum256([]byte(detailType + "\x00" + actionID + "\x00" + createdAt))
	return hex.EncodeToString(sum[:16])
}

// Event is a parsed event: exactly one of the pointers is set.
type Event struct {
	DetailType string
	Consumed   *Consumed
	Canceled   *Canceled
	Expired    *Expired
	Used       *Used
	Released   *UseReleased
}

// Common returns the fields every event has.
func (e *Event) Common() Common {
	switch {
	case e.Consumed != nil:
		return e.Consumed.Common
	case e.Canceled != nil:
		return e.Canceled.Common
	case e.Used != nil:
		return e.Used.Common
	case e.Released != nil:
		return e.Released.Common
	}
	return e.Expired.Common
}

// Parse decodes an EventBridge event delivered to a subscriber Lambda. It
// rejects an event whose source is not DefaultSource, unknown detail types
// and schema versions with a clear error. Use ParseFrom when the stack
// publishes with another exactonce:eventSource.
func Parse(ev lambdaevents.CloudWatchEvent) (*Event, error) {
	return ParseFrom(ev, DefaultSource)
}

// ParseFrom is Parse for events published with the given source. Checking
// it matters for de-duplication: an event with a real eventId from anyone
// else would otherwise be recorded as handled and the genuine one skipped.
// (The stack's bus policy also lets only ExactOnce's functions put events
// with its source.)
func ParseFrom(ev lambdaevents.CloudWatchEvent, source string) (*Event, error) {
	if ev.Source != source {
		return nil, fmt.Errorf("events: source %q is not ExactOnce's (%q)", ev.Source, source)
	}
	var probe struct {
		Version string `json:"version"`
		EventID string `json:"eventId"`
	}
	if !utf8.Valid(ev.Detail) {
		// encoding/json would read each such byte as U+FFFD: eventIds that
		// differ only there would parse to one id, one event de-duplicated
		// away by the other.
		return nil, errors.New("events: detail is not JSON: it is not UTF-8 text")
	}
	if err := json.Unmarshal(ev.Detail, &probe); err != nil {
		return nil, fmt.Errorf("events: detail is not JSON: %w", err)
	}
	if probe.Version != Version {
		return nil, fmt.Errorf("events: unsupported detail version %q (this package reads %q; upgrade it)", probe.Version, Version)
	}
	if probe.EventID == "" {
		return nil, fmt.Errorf("events: detail has no eventId")
	}
	out := &Event{DetailType: ev.DetailType}
	var target any
	switch ev.DetailType {
	case TypeConsumed:
		out.Consumed = &Consumed{}
		target = out.Consumed
	case TypeCanceled:
		out.Canceled = &Canceled{}
		target = out.Canceled
	case TypeExpired:
		out.Expired = &Expired{}
		target = out.Expired
	case TypeUsed:
		out.Used = &Used{}
		target = out.Used
	case TypeUseReleased:
		out.Released = &UseReleased{}
		target = out.Released
	default:
		return nil, fmt.Errorf("events: unknown detail-type %q", ev.DetailType)
	}
	if err := json.Unmarshal(ev.Detail, target); err != nil {
		return nil, fmt.Errorf("events: %s detail: %w", ev.DetailType, err)
	}
	return out, nil
}
