package idempotency_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/internal/testkit"
)

// TestReviewInvalidUTF8ResponseRunsTwice: Run accepts any []byte response of
// at most MaxResponseBytes, but the table stores it as a DynamoDB string:
// the SDK turns each byte that is not UTF-8 into U+FFFD (3 bytes), so a
// 150 KB response becomes a 450 KB item, Complete is refused, and the key
// frees itself when its lease lapses: the retry runs the effect again.
func TestReviewInvalidUTF8ResponseRunsTwice(t *testing.T) {
	table, _ := newTable(t, testkit.Endpoint)
	clk := newClock()
	effects := 0
	resp := bytes.Repeat([]byte{0xff}, 150<<10) // well under MaxResponseBytes
	call := idempotency.Call{Key: "k", Fingerprint: "fp", Lease: time.Second, Now: clk.Now}
	fn := func(context.Context) ([]byte, error) { effects++; return resp, nil }
	_, err1 := idempotency.Run(context.Background(), table, call, fn)
	clk.Advance(2 * time.Second)
	_, err2 := idempotency.Run(context.Background(), table, call, fn)
	if effects != 1 {
		t.Fatalf("the effect ran %d times (first error: %v; second error: %v)", effects, err1, err2)
	}
}

// TestReviewInvalidUTF8ResponseReplaysOtherBytes: a small response that is
// not UTF-8 is stored, but its replay is not the bytes the first call got.
func TestReviewInvalidUTF8ResponseReplaysOtherBytes(t *testing.T) {
	table, _ := newTable(t, testkit.Endpoint)
	resp := []byte{'o', 'k', 0xff}
	call := idempotency.Call{Key: "k2", Fingerprint: "fp"}
	fn := func(context.Context) ([]byte, error) { return resp, nil }
	if _, err := idempotency.Run(context.Background(), table, call, fn); err != nil {
		t.Fatal(err)
	}
	r, err := idempotency.Run(context.Background(), table, call, fn)
	if err != nil || !r.Replayed || !bytes.Equal(r.Response, resp) {
		t.Fatalf("replay: %q (replayed %v, err %v), first answer was %q", r.Response, r.Replayed, err, resp)
	}
}
