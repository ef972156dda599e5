package idempotency_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/idempotency"
)

// TestStringsThatAreNotUTF8AreRefused: encoding/json writes each byte of a
// string that is not UTF-8 as U+FFFD, so "\xff" and "\xfe" would make one
// fingerprint, and one key: a payload changed under a key would replay as
// if it were the same. Such a string is refused (nothing to compare), while
// U+FFFD itself, as text or as a JSON escape, is a character like any other.
func TestStringsThatAreNotUTF8AreRefused(t *testing.T) {
	type data struct {
		S string            `json:"s"`
		M map[string]string `json:"m,omitempty"`
	}
	for _, c := range []struct {
		name string
		v    any
	}{
		{"a string", "\xff"},
		{"a struct field", data{S: "a\xfeb"}},
		{"a map key", data{M: map[string]string{"\x80": "v"}}},
		{"a map value", map[string]any{"k": []any{"ok", "\xc3"}}},
	} {
		if fp, err := idempotency.Fingerprint(c.v, nil); err == nil {
			t.Errorf("%s that is not UTF-8: fingerprint %s, want an error", c.name, fp)
		}
	}
	for _, v := range []any{"\uFFFD", data{S: "\uFFFD"}, json.RawMessage(`{"s":"\ufffd"}`), json.RawMessage(`{"s":"\\ufffd"}`)} {
		if _, err := idempotency.Fingerprint(v, nil); err != nil {
			t.Errorf("Fingerprint(%#v): %v", v, err)
		}
	}
	// The payload a JMESPath picks out of binary data.
	pick := idempotency.PayloadJMESPath[events.APIGatewayV2HTTPRequest]("powertools_base64(body)")
	for _, body := range []string{"/w==", "/g=="} { // 0xff, 0xfe
		v, err := pick(events.APIGatewayV2HTTPRequest{Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if fp, err := idempotency.Fingerprint(v, nil); err == nil {
			t.Errorf("the payload of base64 %s (not UTF-8): fingerprint %s, want an error", body, fp)
		}
	}
}

// TestWholeInputKeyNotUTF8RunsNothing: with no Key the whole input is the
// key; two inputs that differ only in bytes that are not UTF-8 must not
// share it (the second got the first's answer). Such an input is refused
// before the effect runs.
func TestWholeInputKeyNotUTF8RunsNothing(t *testing.T) {
	table, _ := newTable(t)
	type in struct{ Data string }
	runs := 0
	echo := idempotency.Wrap(func(_ context.Context, i in) (string, error) {
		runs++
		return "ran:" + i.Data, nil
	}, idempotency.Options[in, string]{Store: table})
	for _, d := range []string{"\xff", "\xfe"} {
		if out, err := echo(context.Background(), in{Data: d}); err == nil {
			t.Errorf("input %q: answered %q, want an error", d, out)
		}
	}
	if runs != 0 {
		t.Errorf("the effect ran %d times for inputs that are not UTF-8", runs)
	}
	if out, err := echo(context.Background(), in{Data: "\uFFFD"}); err != nil || out != "ran:\uFFFD" || runs != 1 {
		t.Errorf("U+FFFD as text: %q, %v (runs %d)", out, err, runs)
	}
}

// TestPowertoolsJSONReadsOneValue: powertools_json parses its string as one
// JSON value, as Powertools' json.loads and JSON.parse do: text after it
// is an error, not ignored (`{"amount":500} {"amount":900}` read as 500), and
// so is text that is not UTF-8.
func TestPowertoolsJSONReadsOneValue(t *testing.T) {
	key := idempotency.KeyJMESPath[events.APIGatewayV2HTTPRequest]("powertools_json(body).amount")
	if got, err := key(events.APIGatewayV2HTTPRequest{Body: `{"amount":500} `}); err != nil || got != "500" {
		t.Fatalf("one value and a space: %q, %v", got, err)
	}
	for _, body := range []string{`{"amount":500} {"amount":900}`, `{"amount":500}x`, "{\"amount\":500,\"n\":\"\xff\"}"} {
		if got, err := key(events.APIGatewayV2HTTPRequest{Body: body}); err == nil {
			t.Errorf("powertools_json(%q): %q, want an error", body, got)
		}
	}
}

// TestSubSecondRetentionKeepsTheKey: DynamoDB TTL counts whole seconds. A
// retention under one (or a time just before a second's end) must not make
// the key's end of retention fall before its time: a completed key replays
// until then, and a claim's record outlives its lease.
func TestSubSecondRetentionKeepsTheKey(t *testing.T) {
	table, _ := newTable(t)
	table.Retention = 400 * time.Millisecond
	clk := newClock()
	clk.ms.Store(time.Now().Truncate(time.Second).Add(900 * time.Millisecond).UnixMilli()) // .900: the next second is 100 ms away
	runs := 0
	charge := idempotency.Wrap(func(_ context.Context, o order) (receipt, error) {
		runs++
		return receipt{Charge: "ch_" + o.ID}, nil
	}, idempotency.Options[order, receipt]{Store: table, Key: orderID, Now: clk.Now, Lease: 10 * time.Second})
	for range 2 {
		if _, err := charge(context.Background(), order{ID: "o-1"}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(100 * time.Millisecond)
	}
	if runs != 1 {
		t.Fatalf("completed with a 400 ms retention, the key ran %d times within 200 ms", runs)
	}

	// A claim whose holder still runs: its lease (10 s) must hold the key
	// though the retention is shorter than a second.
	now := clk.Now()
	call := idempotency.Call{Key: "held", Fingerprint: "fp", Lease: 10 * time.Second, Now: func() time.Time { return now }}
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = idempotency.Run(context.Background(), table, call, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("first"), nil
		})
	}()
	<-started
	defer close(release)
	later := now.Add(9700 * time.Millisecond)
	second := call
	second.Now = func() time.Time { return later }
	_, err := idempotency.Run(context.Background(), table, second, func(context.Context) ([]byte, error) {
		t.Error("a second caller ran the effect while the first one's lease ran")
		return []byte("second"), nil
	})
	if err == nil {
		t.Error("the second caller within the lease got no error")
	}
}
