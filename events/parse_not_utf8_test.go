package events_test

import (
	"encoding/json"
	"strings"
	"testing"

	lambdaevents "github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/events"
)

// TestParseRefusesDetailThatIsNotUTF8: JSON is UTF-8 text, and Go's decoder
// turns each byte that is not into U+FFFD, so two details whose eventIds
// differ only in such bytes would parse to one eventId, and a subscriber
// de-duplicating on it would acknowledge the second without handling it.
// A detail that is not UTF-8 does not parse: "detail is not JSON".
func TestParseRefusesDetailThatIsNotUTF8(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"ev-\xff", "ev-\xfe"} {
		detail := `{"version":"1","eventId":"` + id + `","actionId":"a","userId":"u","consumedAt":"t"}`
		ev, err := events.Parse(lambdaevents.CloudWatchEvent{Source: events.DefaultSource, DetailType: events.TypeConsumed, Detail: json.RawMessage(detail)})
		if err == nil {
			got := ev.Common().EventID
			if other, ok := seen[got]; ok {
				t.Errorf("details with eventId %+q and %+q both parsed to eventId %+q", other, id, got)
			}
			seen[got] = id
			t.Errorf("detail with eventId %+q parsed (to eventId %+q), want an error", id, got)
		} else if !strings.Contains(err.Error(), "not JSON") {
			t.Errorf("eventId %+q: error %v, want one saying the detail is not JSON", id, err)
		}
	}
}
