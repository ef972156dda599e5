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

// TestNullAnswerIsAnError: a 200 whose body is JSON null (a proxy's, or a
// server's bug) is a decoding error. Before, GetAction returned a zero
// Action and no error: an action with no id, no state, taken as read.
func TestNullAnswerIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(" null\n"))
	}))
	defer srv.Close()
	a, err := New(srv.URL).GetAction(context.Background(), "a")
	if err == nil {
		t.Fatalf("GetAction = %+v, nil error", a)
	}
}
