package action

import (
	"errors"
	"testing"
	"time"
)

func seats() *Action {
	a := open()
	a.MaxUses, a.Releasable, a.UsesHeld = 2, true, 1
	a.Uses = map[string]Use{
		"held":     {At: t0, N: 1, Write: Write{Key: "k1", Fingerprint: "f1"}},
		"released": {At: t0, N: 1, ReleasedAt: t0.Add(time.Minute), Write: Write{Key: "k2", Fingerprint: "f2"}},
	}
	a.UseKeys = map[string]string{"k1": "held", "k2": "released"}
	return a
}

// outcome is code, or "400 field" for an *InvalidError.
func outcome(err error) string {
	var inv *InvalidError
	if errors.As(err, &inv) {
		return "400 " + inv.Field
	}
	return string(code(err))
}

func TestClassifyUse(t *testing.T) {
	at := t0.Add(time.Second)
	tests := []struct {
		name string
		edit func(*Action)
		at   Attempt
		want string
	}{
		{"missing", nil, Attempt{Now: at, UseID: "x"}, "action_not_found"},
		{"single-use action", func(a *Action) { a.MaxUses = 0 }, Attempt{Now: at, UseID: "x"}, "400 useId"},
		{"this useId holds its use", nil, Attempt{Now: at, UseID: "held"}, "replay"},
		{"held, even after a cancel", func(a *Action) { a.CanceledAt = t0 }, Attempt{Now: at, UseID: "held"}, "replay"},
		{"held, its key with another body", nil, Attempt{Now: at, UseID: "held", Key: "k1", Fingerprints: []string{"other"}}, "idempotency_key_reused"},
		{"keyed retry of a released take", nil, Attempt{Now: at, UseID: "released", Key: "k2", Fingerprints: []string{"f2"}}, "replay"},
		{"a used key on another useId", nil, Attempt{Now: at, UseID: "new", Key: "k1", Fingerprints: []string{"f9"}}, "idempotency_key_reused"},
		{"canceled", func(a *Action) { a.CanceledAt = t0 }, Attempt{Now: at, UseID: "new"}, "canceled"},
		{"expired", nil, Attempt{Now: t0.Add(2 * time.Hour), UseID: "new"}, "expired"},
		{"pending", nil, Attempt{Now: t0.Add(-time.Second), UseID: "new"}, "not_active"},
		{"full", func(a *Action) { a.UsesHeld = 2 }, Attempt{Now: at, UseID: "new"}, "no_uses_left"},
		{"full, released useId takes no replay", func(a *Action) { a.UsesHeld = 2 }, Attempt{Now: at, UseID: "released"}, "no_uses_left"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := seats()
			if tt.edit != nil {
				tt.edit(a)
			}
			if tt.name == "missing" {
				a = nil
			}
			if got := outcome(ClassifyUse(a, tt.at)); got != tt.want {
				t.Fatalf("ClassifyUse = %s, want %s", got, tt.want)
			}
		})
	}
	// A plain consume (no useId) on a multi-use action is a 400 naming useId.
	if got := outcome(ClassifyConsume(seats(), Attempt{Now: at})); got != "400 useId" {
		t.Fatalf("ClassifyConsume on a multi-use action = %s", got)
	}
}

func TestClassifyRelease(t *testing.T) {
	at := t0.Add(time.Second)
	tests := []struct {
		name string
		edit func(*Action)
		use  string
		want string
	}{
		{"not releasable", func(a *Action) { a.Releasable = false }, "held", "not_releasable"},
		{"single-use", func(a *Action) { a.MaxUses, a.Releasable = 0, false }, "held", "not_releasable"},
		{"unknown useId", nil, "nobody", "use_not_found"},
		{"released already", nil, "released", "replay"},
		{"released already, then canceled", func(a *Action) { a.CanceledAt = t0 }, "released", "replay"},
		{"held on a canceled action", func(a *Action) { a.CanceledAt = t0 }, "held", "canceled"},
		{"held on an expired action", func(a *Action) { a.ExpiredAt = t0 }, "held", "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := seats()
			if tt.edit != nil {
				tt.edit(a)
			}
			if got := outcome(ClassifyRelease(a, Attempt{Now: at, UseID: tt.use})); got != tt.want {
				t.Fatalf("ClassifyRelease = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestValidateUses(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		req   CreateRequest
		field string
		max   int
	}{
		{CreateRequest{UserID: "u"}, "", 0},
		{CreateRequest{UserID: "u", MaxUses: n(1)}, "", 0},
		{CreateRequest{UserID: "u", MaxUses: n(1), Releasable: true}, "", 1},
		{CreateRequest{UserID: "u", MaxUses: n(1000)}, "", 1000},
		{CreateRequest{UserID: "u", MaxUses: n(1001)}, "maxUses", 0},
		{CreateRequest{UserID: "u", MaxUses: n(0)}, "maxUses", 0},
		{CreateRequest{UserID: "u", MaxUses: n(2), PIN: "2468"}, "pin", 0},
		{CreateRequest{UserID: "u", Releasable: true, PIN: "2468"}, "pin", 0},
	} {
		a, err := ValidateCreate(&tc.req, t0)
		var inv *InvalidError
		switch {
		case tc.field != "" && (!errors.As(err, &inv) || inv.Field != tc.field):
			t.Errorf("%+v: %v, want a 400 naming %s", tc.req, err, tc.field)
		case tc.field == "" && (err != nil || a.MaxUses != tc.max):
			t.Errorf("%+v: %v, maxUses %v, want %d", tc.req, err, a, tc.max)
		}
	}
}
