package republish

import (
	"context"
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
		name string
		req  Request
		want string
	}{
		{"no from", Request{}, "from must be an RFC 3339 time"},
		{"bad to", Request{From: "2026-11-22T00:00:00Z", To: "tomorrow"}, "to must be an RFC 3339 time"},
		{"empty window", Request{From: "2026-11-22T00:00:00Z", To: "2026-11-22T00:00:00Z"}, "is not before"},
		{"too many segments", Request{From: "2026-11-22T00:00:00Z", Segments: 1001}, "at most 1000"},
		{"segment out of range", Request{From: "2026-11-22T00:00:00Z", Segments: 4, Only: []int{4}}, "segment 4 is not in 0..3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.Handle(context.Background(), tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
