package events_test

import (
	"encoding/json"
	"strings"
	"testing"

	lambdaevents "github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/events"
)

func TestParse(t *testing.T) {
	consumed := `{"version":"1","eventId":"abc","actionId":"a1","userId":"u1","kind":"coupon","occurredAt":"2026-11-22T10:00:00.000Z",` +
		`"metadata":{"order":"42"},"consumedAt":"2026-11-22T10:00:00.000Z","reason":"checkout"}`
	ev, err := events.Parse(lambdaevents.CloudWatchEvent{Source: events.DefaultSource, DetailType: events.TypeConsumed, Detail: json.RawMessage(consumed)})
	if err != nil {
		t.Fatal(err)
	}
	c := ev.Consumed
	if c == nil || ev.Canceled != nil || ev.Expired != nil {
		t.Fatalf("parsed %+v", ev)
	}
	if c.EventID != "abc" || c.ActionID != "a1" || c.UserID != "u1" || c.Kind != "coupon" || c.Metadata["order"] != "42" ||
		c.ConsumedAt != "2026-11-22T10:00:00.000Z" || c.Reason != "checkout" || ev.Common().EventID != "abc" {
		t.Errorf("consumed: %+v", c)
	}

	for typ, check := range map[string]func(*events.Event) bool{
		events.TypeCanceled: func(e *events.Event) bool { return e.Canceled != nil && e.Canceled.CanceledAt == "t" },
		events.TypeExpired:  func(e *events.Event) bool { return e.Expired != nil && e.Expired.DetectedBy == "ttl" },
	} {
		ev, err := events.Parse(lambdaevents.CloudWatchEvent{Source: events.DefaultSource, DetailType: typ,
			Detail: json.RawMessage(`{"version":"1","eventId":"e","actionId":"a","canceledAt":"t","detectedBy":"ttl"}`)})
		if err != nil || !check(ev) || ev.Common().ActionID != "a" {
			t.Errorf("%s: %+v %v", typ, ev, err)
		}
	}

	bad := []struct {
		name, detailType, detail, want string
	}{
		{"newer version", events.TypeConsumed, `{"version":"2","eventId":"e"}`, `unsupported detail version "2"`},
		{"no version", events.TypeConsumed, `{"eventId":"e"}`, `unsupported detail version ""`},
		{"no event id", events.TypeConsumed, `{"version":"1"}`, "no eventId"},
		{"unknown type", "action.created", `{"version":"1","eventId":"e"}`, `unknown detail-type "action.created"`},
		{"not json", events.TypeConsumed, `nope`, "not JSON"},
		{"wrong field type", events.TypeConsumed, `{"version":"1","eventId":"e","metadata":[1]}`, "action.consumed detail"},
	}
	for _, tc := range bad {
		_, err := events.Parse(lambdaevents.CloudWatchEvent{Source: events.DefaultSource, DetailType: tc.detailType, Detail: json.RawMessage(tc.detail)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

// TestParseSource (issue 14, seen 3): an event with another source, e.g.
// forged by anyone allowed PutEvents on the bus, is rejected before a
// subscriber's de-duplication could record its (real) event id; the
// expected source is configurable like the stack's exactonce:eventSource.
func TestParseSource(t *testing.T) {
	detail := json.RawMessage(`{"version":"1","eventId":"e4d495510d699edfb2d184f168fd9cd7","actionId":"a","userId":"u","consumedAt":"t"}`)
	for _, tc := range []struct {
		name, source, expect string
		ok                   bool
	}{
		{"ExactOnce's default source", "exactonce", "", true},
		{"forged source", "attacker.forged", "", false},
		{"no source", "", "", false},
		{"a configured source", "shop.exactonce", "shop.exactonce", true},
		{"the default when another is configured", "exactonce", "shop.exactonce", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := lambdaevents.CloudWatchEvent{Source: tc.source, DetailType: events.TypeConsumed, Detail: detail}
			var err error
			if tc.expect == "" {
				_, err = events.Parse(ev)
			} else {
				_, err = events.ParseFrom(ev, tc.expect)
			}
			if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "source") {
				t.Fatalf("error %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestEventID(t *testing.T) {
	id := events.EventID(events.TypeConsumed, "a1", "2026-11-22T10:00:00.000Z")
	if len(id) != 32 || id != events.EventID(events.TypeConsumed, "a1", "2026-11-22T10:00:00.000Z") {
		t.Fatalf("not deterministic or not 128-bit hex: %q", id)
	}
	for _, other := range []string{
		events.EventID(events.TypeCanceled, "a1", "2026-11-22T10:00:00.000Z"), // other transition
		events.EventID(events.TypeConsumed, "a2", "2026-11-22T10:00:00.000Z"), // other action
		events.EventID(events.TypeConsumed, "a1", "2026-12-22T10:00:00.000Z"), // id reused after retention
		events.EventID(events.TypeConsumed, "a1\x002026", "-11-22T10:00:00.000Z"),
	} {
		if other == id {
			t.Errorf("collision: %q", other)
		}
	}
}
