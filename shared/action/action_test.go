package action

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func open() *Action {
	return &Action{ID: "a", UserID: "u", ActiveAt: t0, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}
}

func TestStateAt(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Action)
		at   time.Time
		want State
	}{
		{"pending before activeAt", nil, t0.Add(-time.Second), StatePending},
		{"active at activeAt", nil, t0, StateActive},
		{"expired at expiresAt", nil, t0.Add(time.Hour), StateExpired},
		{"consumed wins over the clock", func(a *Action) { a.ConsumedAt = t0 }, t0.Add(2 * time.Hour), StateConsumed},
		{"canceled reads as expired", func(a *Action) { a.CanceledAt = t0 }, t0.Add(time.Minute), StateExpired},
		{"marked expired", func(a *Action) { a.ExpiredAt = t0 }, t0.Add(time.Minute), StateExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := open()
			if tt.edit != nil {
				tt.edit(a)
			}
			if got := a.StateAt(tt.at); got != tt.want {
				t.Fatalf("StateAt = %s, want %s", got, tt.want)
			}
		})
	}
}

func code(err error) Code {
	var r *Rejection
	if errors.As(err, &r) {
		return r.Code
	}
	var rp *Replay
	if errors.As(err, &rp) {
		return "replay"
	}
	return ""
}

func TestClassifyConsumePrecedence(t *testing.T) {
	now := t0.Add(time.Minute)
	tests := []struct {
		name string
		edit func(*Action)
		at   Attempt
		want Code
	}{
		{"consumed beats everything", func(a *Action) {
			a.ConsumedAt, a.CanceledAt, a.ExpiresAt, a.PINHash, a.PINFailures, a.MaxPINAttempts = t0, t0, t0, []byte{1}, 3, 3
		}, Attempt{Now: now}, CodeAlreadyUsed},
		{"same key and body replays", func(a *Action) {
			a.ConsumedAt, a.Consume = t0, Write{Key: "k", Fingerprint: "f"}
		}, Attempt{Now: now, Key: "k", Fingerprints: []string{"f"}}, "replay"},
		{"own request id replays", func(a *Action) {
			a.ConsumedAt, a.Consume = t0, Write{RequestID: "r1", Fingerprint: "f"}
		}, Attempt{Now: now, RequestID: "r1", Fingerprints: []string{"f"}}, "replay"},
		{"a request id with another body is not a replay", func(a *Action) {
			a.ConsumedAt, a.Consume = t0, Write{RequestID: "r1", Fingerprint: "f"}
		}, Attempt{Now: now, RequestID: "r1", Fingerprints: []string{"g"}}, CodeAlreadyUsed},
		{"a replay after the last guess is locked", func(a *Action) {
			a.ConsumedAt, a.Consume = t0, Write{Key: "k", Fingerprint: "f"}
			a.PINHash, a.PINFailures, a.MaxPINAttempts = []byte{1}, 3, 3
		}, Attempt{Now: now, Key: "k", Fingerprints: []string{"f"}}, CodeLocked},
		{"a fingerprint under any known key set matches", func(a *Action) {
			a.ConsumedAt, a.Consume = t0, Write{Key: "k", Fingerprint: "old"}
		}, Attempt{Now: now, Key: "k", Fingerprints: []string{"new", "old"}}, "replay"},
		{"same key other body is reuse", func(a *Action) {
			a.ConsumedAt, a.Consume = t0, Write{Key: "k", Fingerprint: "f"}
		}, Attempt{Now: now, Key: "k", Fingerprints: []string{"g"}}, CodeKeyReused},
		{"other key is already used", func(a *Action) {
			a.ConsumedAt, a.Consume = t0, Write{Key: "k", Fingerprint: "f"}
		}, Attempt{Now: now, Key: "other", Fingerprints: []string{"f"}}, CodeAlreadyUsed},
		{"canceled beats expired", func(a *Action) { a.CanceledAt, a.ExpiresAt = t0, t0 }, Attempt{Now: now}, CodeCanceled},
		{"expired by clock beats not active", func(a *Action) { a.ActiveAt, a.ExpiresAt = now.Add(time.Hour), now }, Attempt{Now: now}, CodeExpired},
		{"marked expired", func(a *Action) { a.ExpiredAt = t0 }, Attempt{Now: now}, CodeExpired},
		{"not active beats locked", func(a *Action) {
			a.ActiveAt, a.PINHash, a.PINFailures, a.MaxPINAttempts = now.Add(time.Second), []byte{1}, 3, 3
		}, Attempt{Now: now}, CodeNotActive},
		{"locked beats pin required", func(a *Action) { a.PINHash, a.PINFailures, a.MaxPINAttempts = []byte{1}, 3, 3 }, Attempt{Now: now}, CodeLocked},
		{"pin required", func(a *Action) { a.PINHash, a.PINFailures, a.MaxPINAttempts = []byte{1}, 2, 3 }, Attempt{Now: now}, CodePINRequired},
		{"a presented pin is the store's to judge", func(a *Action) { a.PINHash, a.PINFailures, a.MaxPINAttempts = []byte{1}, 2, 3 }, Attempt{Now: now, PINPresented: true}, CodeInternal},
		{"consumable item is a bug", nil, Attempt{Now: now}, CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := open()
			if tt.edit != nil {
				tt.edit(a)
			}
			if got := code(ClassifyConsume(a, tt.at)); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
	if got := code(ClassifyConsume(nil, Attempt{Now: now})); got != CodeNotFound {
		t.Fatalf("nil item: got %q", got)
	}
}

func TestClassifyCancel(t *testing.T) {
	now := t0.Add(time.Minute)
	tests := []struct {
		name string
		edit func(*Action)
		at   Attempt
		want Code
	}{
		{"consumed", func(a *Action) { a.ConsumedAt = t0 }, Attempt{Now: now}, CodeAlreadyUsed},
		{"canceled again answers the first", func(a *Action) { a.CanceledAt = t0 }, Attempt{Now: now}, "replay"},
		{"canceled, key reused", func(a *Action) { a.CanceledAt, a.Cancel = t0, Write{Key: "k", Fingerprint: "f"} }, Attempt{Now: now, Key: "k", Fingerprints: []string{"x"}}, CodeKeyReused},
		{"expired", func(a *Action) { a.ExpiresAt = now }, Attempt{Now: now}, CodeExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := open()
			tt.edit(a)
			if got := code(ClassifyCancel(a, tt.at)); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestClassifyCreate(t *testing.T) {
	a := open()
	a.Create = Write{Key: "k", Fingerprint: "f", RequestID: "r"}
	for _, tt := range []struct {
		at   Attempt
		want Code
	}{
		{Attempt{Key: "k", Fingerprints: []string{"f"}}, "replay"},
		{Attempt{RequestID: "r", Fingerprints: []string{"f"}}, "replay"},
		{Attempt{RequestID: "r", Fingerprints: []string{"g"}}, CodeExists},
		{Attempt{Key: "k", Fingerprints: []string{"g"}}, CodeKeyReused},
		{Attempt{Key: "other", Fingerprints: []string{"f"}}, CodeExists},
		{Attempt{}, CodeExists},
	} {
		if got := code(ClassifyCreate(a, tt.at)); got != tt.want {
			t.Errorf("%+v: got %q, want %q", tt.at, got, tt.want)
		}
	}
}

func TestValidateCreate(t *testing.T) {
	three := 3
	zero := 0
	tests := []struct {
		name  string
		req   CreateRequest
		field string // "" means valid
	}{
		{"minimal", CreateRequest{UserID: "u"}, ""},
		{"full", CreateRequest{ActionID: "a.b:c-1", UserID: "u", Kind: "coupon/v1", ActiveAt: "2026-11-22T12:00:00Z",
			ExpiresAt: "2026-11-23T12:00:00.5+01:00", Metadata: map[string]string{"k": "v"}, PIN: "1234", MaxPINAttempts: &three,
			Payload: []byte(`{"a":[1,2]}`)}, ""},
		{"missing userId", CreateRequest{}, "userId"},
		{"bad actionId", CreateRequest{ActionID: "a/b", UserID: "u"}, "actionId"},
		{"long actionId", CreateRequest{ActionID: strings.Repeat("a", 129), UserID: "u"}, "actionId"},
		{"control char in userId", CreateRequest{UserID: "u\x00"}, "userId"},
		// A path segment of /users/{userId}/actions that API Gateway
		// decodes before routing cannot carry these: refused at create.
		{"slash in userId", CreateRequest{UserID: "team/alice"}, "userId"},
		{"question mark in userId", CreateRequest{UserID: "who?"}, "userId"},
		{"hash in userId", CreateRequest{UserID: "u#1"}, "userId"},
		{"percent in userId", CreateRequest{UserID: "100%"}, "userId"},
		{"spaces, accents and @ are reachable", CreateRequest{UserID: "Zoë Smith <zoe@example.com>"}, ""},
		{"bad time", CreateRequest{UserID: "u", ActiveAt: "tomorrow"}, "activeAt"},
		{"expires before active", CreateRequest{UserID: "u", ActiveAt: "2026-11-23T00:00:00Z", ExpiresAt: "2026-11-22T13:00:00Z"}, "expiresAt"},
		{"expires in the past", CreateRequest{UserID: "u", ActiveAt: "2026-11-20T00:00:00Z", ExpiresAt: "2026-11-21T00:00:00Z"}, "expiresAt"},
		{"too far", CreateRequest{UserID: "u", ExpiresAt: "2030-01-01T00:00:00Z"}, "expiresAt"},
		{"bad metadata key", CreateRequest{UserID: "u", Metadata: map[string]string{"a b": "v"}}, "metadata"},
		{"short pin", CreateRequest{UserID: "u", PIN: "123"}, "pin"},
		{"attempts without pin", CreateRequest{UserID: "u", MaxPINAttempts: &three}, "maxPinAttempts"},
		{"zero attempts", CreateRequest{UserID: "u", PIN: "1234", MaxPINAttempts: &zero}, "maxPinAttempts"},
		{"huge payload", CreateRequest{UserID: "u", Payload: []byte(`"` + strings.Repeat("x", MaxPayloadBytes) + `"`)}, "payload"},
		{"deep payload", CreateRequest{UserID: "u", Payload: []byte(strings.Repeat("[", 33) + strings.Repeat("]", 33))}, "payload"},
		{"brackets in strings do not count", CreateRequest{UserID: "u", Payload: []byte(`"` + strings.Repeat("[", 40) + `"`)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ValidateCreate(&tt.req, t0)
			var inv *InvalidError
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.field == "":
				if !a.ExpiresAt.After(a.ActiveAt) || a.CreatedAt != t0 {
					t.Fatalf("bad times %+v", a)
				}
			case !errors.As(err, &inv) || inv.Field != tt.field:
				t.Fatalf("got %v, want an error on %s", err, tt.field)
			}
		})
	}
}

func TestValidateCreateDefaults(t *testing.T) {
	a, err := ValidateCreate(&CreateRequest{UserID: "u", PIN: "1234"}, t0.Add(123456*time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	if a.ActiveAt != t0 || a.ExpiresAt != t0.Add(DefaultLifetime) || a.MaxPINAttempts != DefaultMaxPINAttempts {
		t.Fatalf("defaults: %+v", a)
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if len(id) != 32 || ValidateID("id", id) != nil || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
}
