package action

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// outcome is code, or "400 field" for an *InvalidError.
func outcome(err error) string {
	var inv *InvalidError
	if errors.As(err, &inv) {
		return "400 " + inv.Field
	}
	return string(code(err))
}

// TestGateCapsAddUpToMaxUses: for every maxUses the gates' capacities add
// up to exactly maxUses, none is over GateSeats, and they differ by at most
// one (spread evenly, so every gate fills at the same pace).
func TestGateCapsAddUpToMaxUses(t *testing.T) {
	for _, n := range []int{1, 2, 23, 24, 25, 47, 48, 49, 1000, 1500, 99_999, 100_000, MaxUsesLimit} {
		g, sum, lo, hi := Gates(n), 0, GateSeats, 0
		for i := range g {
			c := GateCap(n, i)
			sum += c
			lo, hi = min(lo, c), max(hi, c)
		}
		if sum != n || hi > GateSeats || hi-lo > 1 || lo < 1 {
			t.Errorf("maxUses %d: %d gates, capacities add up to %d, range %d-%d", n, g, sum, lo, hi)
		}
	}
	if Gates(MaxUsesLimit) != 41_667 {
		t.Errorf("Gates(%d) = %d", MaxUsesLimit, Gates(MaxUsesLimit))
	}
}

// TestHomeGatesSpread: useIds land on every gate about equally (a hot action
// spreads its writes), and a useId's token and home never change.
func TestHomeGatesSpread(t *testing.T) {
	const gates, ids = 64, 64_000
	count := make([]int, gates)
	for i := range ids {
		tok := UseToken(fmt.Sprintf("device-%d", i))
		if len(tok) != 11 {
			t.Fatalf("token %q", tok)
		}
		count[HomeGate(tok, gates)]++
	}
	for g, c := range count {
		if c < ids/gates*8/10 || c > ids/gates*12/10 {
			t.Errorf("gate %d got %d of %d useIds (want about %d)", g, c, ids, ids/gates)
		}
	}
	if a1, a2 := UseToken("a"), UseToken(string([]byte{'a'})); a1 != a2 || a1 == UseToken("b") || HomeGate(a1, 7) != HomeGate(a2, 7) {
		t.Fatal("tokens are not a function of the useId")
	}
}

// TestProbeOrderVisitsEveryGate: a useId's probe order (home, then
// home + k·step) visits every gate exactly once, for any number of gates,
// and ProbePosition gives back the k of each gate.
func TestProbeOrderVisitsEveryGate(t *testing.T) {
	for _, gates := range []int{1, 2, 3, 4, 12, 25, 63, 64, 125, 41_667} {
		for i := range 50 {
			tok := UseToken(fmt.Sprintf("u%d", i))
			home, step := HomeGate(tok, gates), ProbeStep(tok, gates)
			seen := make([]bool, gates)
			for k := range gates {
				g := (home + k*step) % gates
				if seen[g] {
					t.Fatalf("%d gates, useId u%d: gate %d visited twice (step %d)", gates, i, g, step)
				}
				seen[g] = true
				if p := ProbePosition(tok, gates, g); p != k {
					t.Fatalf("%d gates, useId u%d: gate %d is at position %d, ProbePosition says %d", gates, i, g, k, p)
				}
			}
		}
	}
}

// TestUseRefScopesKeys: a key names one operation; without a key the
// request id does; the record name is a hash of it.
func TestUseRefScopesKeys(t *testing.T) {
	w := Write{Key: "k1", RequestID: "req"}
	if UseRef(OpTake, w) == UseRef(OpRelease, w) || UseRef(OpTake, w) != "tkk1" || UseRef(OpTake, Write{RequestID: "req"}) != "trreq" {
		t.Fatalf("refs: %q %q", UseRef(OpTake, w), UseRef(OpRelease, w))
	}
	if h := RefHash("tkk1"); len(h) != 12 || h == RefHash("xkk1") {
		t.Fatalf("ref hash %q", h)
	}
}

func TestJudge(t *testing.T) {
	rec := &UseRecord{UseID: "u1", Write: Write{Key: "k", Fingerprint: "f1", RequestID: "r1"}}
	for _, tc := range []struct {
		name  string
		useID string
		at    Attempt
		want  string
	}{
		{"same call", "u1", Attempt{Key: "k", Fingerprints: []string{"f1"}}, "same"},
		{"same key, another body", "u1", Attempt{Key: "k", Fingerprints: []string{"f2"}}, "idempotency_key_reused"},
		{"same key and body, another useId", "u2", Attempt{Key: "k", Fingerprints: []string{"f1"}}, "idempotency_key_reused"},
		{"the SDK's retry of the request", "u1", Attempt{RequestID: "r1", Fingerprints: []string{"f1"}}, "same"},
		{"under an unknown key set", "u1", Attempt{Key: "k", Fingerprints: []string{"kid2:ab"}}, "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := *rec
			if tc.name == "under an unknown key set" {
				r.Write.Fingerprint = "kid1:ab"
			}
			same, err := Judge(&r, tc.useID, tc.at)
			var uk *UnknownKeyError
			got := outcome(err)
			switch {
			case errors.As(err, &uk):
				got = "unknown key"
			case err == nil && same:
				got = "same"
			}
			if got != tc.want {
				t.Fatalf("Judge = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestGateRefusal(t *testing.T) {
	a := open()
	g := &Gate{ActiveAt: a.ActiveAt, ExpiresAt: a.ExpiresAt}
	at := t0.Add(time.Second)
	for _, tc := range []struct {
		name string
		edit func(*Gate)
		now  time.Time
		want string
	}{
		{"open", nil, at, ""},
		{"closed by a cancel", func(g *Gate) { g.Closed = true }, at, "canceled"},
		{"closed beats expired", func(g *Gate) { g.Closed = true }, t0.Add(2 * time.Hour), "canceled"},
		{"expired", nil, t0.Add(2 * time.Hour), "expired"},
		{"pending", nil, t0.Add(-time.Second), "not_active"},
	} {
		c := *g
		if tc.edit != nil {
			tc.edit(&c)
		}
		if got := outcome(GateRefusal(a, &c, tc.now)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestValidateUses(t *testing.T) {
	n := func(i int) *int { return &i }
	for _, tc := range []struct {
		r    CreateRequest
		want string
	}{
		{CreateRequest{MaxUses: n(MaxUsesLimit)}, ""},
		{CreateRequest{MaxUses: n(MaxUsesLimit + 1)}, "400 maxUses"},
		{CreateRequest{MaxUses: n(0)}, "400 maxUses"},
		{CreateRequest{MaxUses: n(3), PIN: "2468"}, "400 pin"},
		{CreateRequest{Releasable: true}, ""},
	} {
		var a Action
		if got := outcome(validateUses(&tc.r, &a)); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.r, got, tc.want)
		}
	}
}

// TestSealedReachesAreShort: the reaches a sealed action's home gates keep
// (how far along its probe order the furthest use of a useId homed there
// lies) for a million uses taken one after another, by the hashes and
// probe orders takes use: a refused take of a sealed action reads the
// gates up to its home gate's reach, not all 41,667 (docs/http-api.md,
// "Sold out", quotes these figures; under the race detector, 100,000 uses).
func TestSealedReachesAreShort(t *testing.T) {
	maxUses := 1_000_000
	if raceDetector {
		maxUses = 100_000
	}
	gates := Gates(maxUses)
	held, reach := make([]int, gates), make([]int, gates)
	for u := range maxUses {
		tok := UseToken(fmt.Sprintf("order-%d", u))
		home, step := HomeGate(tok, gates), ProbeStep(tok, gates)
		for k := range gates {
			if g := (home + k*step) % gates; held[g] < GateCap(maxUses, g) {
				held[g]++
				reach[home] = max(reach[home], k)
				break
			}
		}
	}
	slices.Sort(reach)
	median, p99, most := reach[gates/2], reach[gates*99/100], reach[gates-1]
	t.Logf("%d uses, %d gates, sold out: home gates' reaches median %d, 99th percentile %d, most %d", maxUses, gates, median, p99, most)
	if median > 8 || p99 > 400 {
		t.Fatalf("reaches median %d, 99th percentile %d: a sealed action's refused take would read far", median, p99)
	}
}
