// Package examplesubscriber is the example subscriber: it writes one audit
// log line per ExactOnce event, exactly once per eventId however often
// EventBridge delivers it, using the events/once guard.
package examplesubscriber

import (
	"context"
	"log/slog"

	lambdaevents "github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/events/once"
)

// Subscriber handles the events delivered by an EventBridge rule.
type Subscriber struct {
	Guard *once.Guard
	// Log receives the audit lines (JSON to stdout in Lambda, so CloudWatch
	// Logs holds the audit trail).
	Log *slog.Logger
	// Source is the events' expected source (exactonce:eventSource);
	// "" means events.DefaultSource. Events from any other are refused.
	Source string
}

// Handle records one event. An error makes EventBridge / Lambda redeliver it:
// a parse error (an unknown schema version needs a newer subscriber) and
// once.ErrInProgress (another delivery is handling it) both should.
func (s *Subscriber) Handle(ctx context.Context, ev lambdaevents.CloudWatchEvent) error {
	source := s.Source
	if source == "" {
		source = events.DefaultSource
	}
	e, err := events.ParseFrom(ev, source)
	if err != nil {
		return err
	}
	c := e.Common()
	_, err = s.Guard.Do(ctx, c.EventID, func(ctx context.Context) error {
		attrs := []any{
			slog.String("eventId", c.EventID),
			slog.String("type", e.DetailType),
			slog.String("actionId", c.ActionID),
			slog.String("userId", c.UserID),
			slog.String("kind", c.Kind),
			slog.String("occurredAt", c.OccurredAt),
		}
		switch {
		case e.Consumed != nil:
			attrs = append(attrs, slog.String("reason", e.Consumed.Reason))
		case e.Canceled != nil:
			attrs = append(attrs, slog.String("reason", e.Canceled.Reason))
		case e.Expired != nil:
			attrs = append(attrs, slog.String("detectedBy", e.Expired.DetectedBy))
		case e.Used != nil:
			attrs = append(attrs, slog.String("useId", e.Used.UseID), slog.String("reason", e.Used.Reason))
		case e.Released != nil:
			attrs = append(attrs, slog.String("useId", e.Released.UseID))
		}
		s.Log.InfoContext(ctx, "audit", attrs...)
		return nil
	})
	return err
}
