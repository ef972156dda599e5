package republish

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestRequestValidation: a bad window or segment list is refused before
// anything is read (the Republisher has no table or bus here).
func TestRequestValidation(t *testing.T) {
	r := &Republisher{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, tc := range []struct {
		name  string
		req   Request
		field string
		want  string
	}{
		{"no from", Request{}, "from", "from is required"},
		{"bad from", Request{From: "yesterday"}, "from", "from must be an RFC 3339 time"},
		{"bad to", Request{From: "2026-11-22T00:00:00Z", To: "tomorrow"}, "to", "to must be an RFC 3339 time"},
		{"empty window", Request{From: "2026-11-22T00:00:00Z", To: "2026-11-22T00:00:00Z"}, "from", "must be before to"},
		{"too many segments", Request{From: "2026-11-22T00:00:00Z", Segments: 1001}, "segments", "1 to 1000"},
		{"negative segments", Request{From: "2026-11-22T00:00:00Z", Segments: -1}, "segments", "1 to 1000"},
		{"segment out of range", Request{From: "2026-11-22T00:00:00Z", Segments: 4, Only: []int{4}}, "only", "segment 4 is not in 0..3"},
		{"segment listed twice", Request{From: "2026-11-22T00:00:00Z", Segments: 4, Only: []int{1, 3, 1}}, "only", "segment 1 is listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Handle(context.Background(), tc.req)
			var bad *RequestError
			if !errors.As(err, &bad) || bad.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a RequestError on %s saying %q", err, tc.field, tc.want)
			}
			if tc.req.Validate() == nil {
				t.Fatal("Validate passed it")
			}
		})
	}
}
