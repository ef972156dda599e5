package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAnswerBodyIsBounded: an answer longer than API Gateway ever sends (a
// proxy or a hostile endpoint streaming without end) is refused after
// MaxResponseBytes, not read into memory whole.
func TestAnswerBodyIsBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := []byte(strings.Repeat(" ", 1<<20))
		for range 64 { // 64 MiB of whitespace before any JSON
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	_, err := New(srv.URL).GetAction(context.Background(), "a")
	if !errors.Is(err, ErrResponseTooLarge) {
		t.Fatalf("err = %v, want ErrResponseTooLarge", err)
	}
}
