package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/exactonce/exactonce/idempotency"
)

// TestInvalidUTF8ResponseRunsOnce: Run accepts any []byte response of at
// most MaxResponseBytes, but the table stores it as a DynamoDB string: the
// SDK would turn each byte that is not UTF-8 into U+FFFD (3 bytes), so a
// 150 KB response would become a 450 KB item. The effect still runs once: a
// retry after the lease lapsed does not run it again. Before the fix
// Complete was refused and the key freed itself when its lease lapsed, so
// the retry ran the effect again.
func TestInvalidUTF8ResponseRunsOnce(t *testing.T) {
	table, _ := newTable(t)
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

// TestInvalidUTF8ResponseNeverReplaysOtherBytes: a small response that is
// not UTF-8 would be stored as other bytes (U+FFFD for each bad one), so a
// replay would answer what the first call never got. It is not stored: the
// first call learns ErrResponseNotStored, the key stays held, and a retry
// neither runs the effect again nor replays other bytes.
func TestInvalidUTF8ResponseNeverReplaysOtherBytes(t *testing.T) {
	table, _ := newTable(t)
	resp := []byte{'o', 'k', 0xff}
	effects := 0
	call := idempotency.Call{Key: "k2", Fingerprint: "fp"}
	fn := func(context.Context) ([]byte, error) { effects++; return resp, nil }
	if _, err := idempotency.Run(context.Background(), table, call, fn); !errors.Is(err, idempotency.ErrResponseNotStored) {
		t.Fatalf("first call: %v, want ErrResponseNotStored", err)
	}
	r, err := idempotency.Run(context.Background(), table, call, fn)
	if effects != 1 || r.Replayed || !errors.Is(err, idempotency.ErrResponseNotStored) {
		t.Fatalf("retry: effects %d, replayed %v (%q), err %v; want one effect and ErrResponseNotStored", effects, r.Replayed, r.Response, err)
	}
}
