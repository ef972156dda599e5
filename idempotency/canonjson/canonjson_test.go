package canonjson

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

func TestNumberExact(t *testing.T) {
	for lit, want := range map[string]string{
		"9007199254740993":           "9007199254740993",
		"9007199254740992":           "9007199254740992",
		"0":                          "0",
		"-0":                         "-0",
		"-0.0e7":                     "-0",
		"0.000":                      "0",
		"1e400":                      "1e+400",
		"2e999":                      "2e+999",
		"0.1":                        "0.1",
		"0.10000000000000001":        "0.10000000000000001",
		"1.0":                        "1",
		"10E-1":                      "1",
		"100":                        "100",
		"1e2":                        "100",
		"1E+21":                      "1e+21",
		"123456789012345678901":      "123456789012345678901",
		"0.000001":                   "0.000001",
		"0.0000001":                  "1e-7",
		"-1.5e-10":                   "-1.5e-10",
		"00.5":                       "0.5", // not valid JSON, but harmless
		"1e-99999999999999999999999": "1e-99999999999999999999999",
		"12.3400e1":                  "123.4",
	} {
		if got := Number(lit); got != want {
			t.Errorf("Number(%s) = %s, want %s", lit, got, want)
		}
	}
}

// TestSameAsJCSForDoubles: every number written as its double's shortest
// form canonicalises exactly as RFC 8785 has it, so the fingerprints of
// ordinary bodies did not change.
func TestSameAsJCSForDoubles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(f float64) {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return // not JSON
		}
		for _, format := range []byte{'g', 'e', 'f'} {
			if format == 'f' && (math.Abs(f) > 1e30 || math.Abs(f) < 1e-30 && f != 0) {
				continue
			}
			lit := strconv.FormatFloat(f, format, -1, 64)
			jcs := jsontext.Value(lit)
			if err := jcs.Canonicalize(); err != nil {
				t.Fatal(err)
			}
			if f == 0 && math.Signbit(f) {
				continue // JCS makes -0 into 0; here it stays -0 (TestNumberExact)
			}
			if got := Number(lit); got != string(jcs) {
				t.Fatalf("%s: %s, JCS %s", lit, got, jcs)
			}
		}
	}
	for _, f := range []float64{0, 1, -1, 0.1, 1e21, 1e20, 123e-7, 1e-6, 5e-324, math.MaxFloat64, 9007199254740992, 0.5, 1.5e300} {
		check(f)
	}
	for range 20000 {
		check(math.Float64frombits(r.Uint64()))
		check(float64(r.Int64N(1<<62)) / math.Pow10(r.IntN(30)))
	}
}

func TestCanonicalize(t *testing.T) {
	for in, want := range map[string]string{
		` { "b" : [1.0, 2e0, "\u0041"], "a": {"y": -0, "x": 9007199254740993} } `: `{"a":{"x":9007199254740993,"y":-0},"b":[1,2,"A"]}`,
		`1e400`: `1e+400`,
		`"s"`:   `"s"`,
	} {
		got, err := Canonicalize([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("%s: %s %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `[1,]`, `{} {}`, "\"\xff\"", ``} {
		if _, err := Canonicalize([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
