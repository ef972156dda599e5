// Package canonjson canonicalises a JSON value the way RFC 8785 (JCS) does
// (members sorted, no whitespace, minimal string escapes, numbers in the
// ECMAScript form), except that a number keeps its exact value. JCS formats
// a number through an IEEE 754 double, so 9007199254740993 and
// 9007199254740992, 0.1 and 0.10000000000000001, 1e400 and 2e999, 0 and -0
// each come out as one number; two request bodies that differ only there
// would be one request. Here the number's own decimal digits are formatted
// the way ECMAScript formats a double's shortest digits, so a number a
// double holds exactly (written in its shortest form) canonicalises exactly
// as JCS has it, and every other number keeps its digits. -0 stays -0.
package canonjson

import (
	"bytes"
	"io"
	"math/big"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// Canonicalize returns the canonical form of the JSON value raw. It refuses
// what jsontext's decoder refuses (invalid UTF-8, duplicate member names,
// nesting deeper than its limit, trailing data), with the same errors
// (*jsontext.SyntacticError naming the place).
func Canonicalize(raw []byte) ([]byte, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	var buf bytes.Buffer
	enc := jsontext.NewEncoder(&buf)
	for {
		if dec.PeekKind() == '0' {
			num, err := dec.ReadValue()
			if err != nil {
				return nil, err
			}
			if err := enc.WriteValue(jsontext.Value(Number(string(num)))); err != nil {
				return nil, err
			}
			continue
		}
		tok, err := dec.ReadToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := enc.WriteToken(tok); err != nil {
			return nil, err
		}
	}
	out := jsontext.Value(bytes.TrimSpace(buf.Bytes()))
	// Sorted members and canonical strings, numbers as written above.
	if err := out.Canonicalize(jsontext.CanonicalizeRawInts(false), jsontext.CanonicalizeRawFloats(false)); err != nil {
		return nil, err
	}
	return out, nil
}

// Number formats a valid JSON number literal canonically: its exact value
// as ECMAScript's Number::toString lays out digits and exponent (digits
// without leading or trailing zeros; plain notation for exponents from -7
// to 20, else d.ddde±x), keeping the sign of zero.
func Number(lit string) string {
	neg := strings.HasPrefix(lit, "-")
	lit = strings.TrimPrefix(lit, "-")
	mant, exp, _ := strings.Cut(strings.ToLower(lit), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	e := new(big.Int)
	if exp != "" {
		e.SetString(strings.TrimPrefix(exp, "+"), 10) // a valid literal's exponent always parses
	}
	// value = digits × 10^(e - len(frac))
	e.Sub(e, big.NewInt(int64(len(frac))))
	digits := strings.TrimLeft(intPart+frac, "0")
	sign := ""
	if neg {
		sign = "-"
	}
	if digits == "" {
		return sign + "0"
	}
	trimmed := strings.TrimRight(digits, "0")
	e.Add(e, big.NewInt(int64(len(digits)-len(trimmed))))
	digits = trimmed
	// ECMAScript's n: value = 0.digits × 10^n.
	k := len(digits)
	n := new(big.Int).Add(e, big.NewInt(int64(k)))
	if n.IsInt64() {
		switch n := int(n.Int64()); {
		case k <= n && n <= 21:
			return sign + digits + strings.Repeat("0", n-k)
		case 0 < n && n <= 21:
			return sign + digits[:n] + "." + digits[n:]
		case -6 < n && n <= 0:
			return sign + "0." + strings.Repeat("0", -n) + digits
		}
	}
	x := n.Sub(n, big.NewInt(1))
	out := sign + digits[:1]
	if k > 1 {
		out += "." + digits[1:]
	}
	if x.Sign() >= 0 {
		return out + "e+" + x.String()
	}
	return out + "e" + x.String()
}
