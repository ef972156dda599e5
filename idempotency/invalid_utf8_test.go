package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

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

// TestWrapResultNotUTF8IsNotStored: a Wrap'd function whose result holds a
// string that is not UTF-8 gets ErrResponseNotStored and its key stays
// held. Before the fix encoding/json wrote each bad byte as U+FFFD, so the
// key completed with other text than the first caller got, and every
// replay answered what the first call never got (the case
// TestInvalidUTF8ResponseNeverReplaysOtherBytes rules out for Run).
func TestWrapResultNotUTF8IsNotStored(t *testing.T) {
	table, _ := newTable(t)
	var runs atomic.Int32
	h := idempotency.Wrap(func(ctx context.Context, o order) (receipt, error) {
		runs.Add(1)
		return receipt{Charge: "ch_\xff\xfe"}, nil
	}, idempotency.Options[order, receipt]{Store: table, Namespace: "utf8", Key: orderID})
	ctx := context.Background()
	first, err1 := h(ctx, order{ID: "k"})
	second, err2 := h(ctx, order{ID: "k"})
	if runs.Load() != 1 {
		t.Fatalf("runs %d", runs.Load())
	}
	if err1 == nil && err2 == nil && first != second {
		t.Fatalf("first call got %q, its replay %q: a replay answers what the first call never got", first.Charge, second.Charge)
	}
	if !errors.Is(err1, idempotency.ErrResponseNotStored) || !errors.Is(err2, idempotency.ErrInProgress) {
		t.Fatalf("first %v, second %v; want ErrResponseNotStored, then ErrInProgress", err1, err2)
	}
}

// TestKeyFromBinaryMultiSelectIsRefused: a key picked by a multi-select out
// of binary data (powertools_base64 of 0xff and of 0xfe) is refused, as the
// docs say. Before the fix both were the key ["\ufffd","/pay"] and the
// second request got the first's answer. The docs: "A Go string in the input, the key or the
// payload that is not UTF-8 (raw bytes, say what powertools_base64 decoded
// from binary data) is refused before the function runs: JSON would write
// each such byte as U+FFFD, so "\xff" and "\xfe" would be one payload and
// one key".
func TestKeyFromBinaryMultiSelectIsRefused(t *testing.T) {
	type req = events.APIGatewayV2HTTPRequest
	key := idempotency.KeyJMESPath[req](`[powertools_base64(body), rawPath]`)
	a, errA := key(req{Body: "/w==", RawPath: "/pay"}) // 0xff
	b, errB := key(req{Body: "/g==", RawPath: "/pay"}) // 0xfe
	if errA == nil && errB == nil && a == b {
		t.Errorf("two keys from other bytes are one: %q (want an error)", a)
	}

	table, _ := newTable(t)
	var runs int
	h := idempotency.Wrap(func(ctx context.Context, r req) (string, error) {
		runs++
		return "handled " + r.Body, nil
	}, idempotency.Options[req, string]{Store: table, Namespace: "bin", Key: key})
	r1, err1 := h(context.Background(), req{Body: "/w==", RawPath: "/pay"})
	r2, err2 := h(context.Background(), req{Body: "/g==", RawPath: "/pay"})
	if runs != 0 && (r2 != "handled /g==" || runs != 2) {
		t.Errorf("first %q %v, second %q %v, runs %d: the second request got the first's answer", r1, err1, r2, err2, runs)
	}
}
