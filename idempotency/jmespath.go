package idempotency

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/jmespath-community/go-jmespath"
)

// KeyJMESPath returns a key function evaluating a JMESPath expression on
// the input's JSON, as Powertools' event_key_jmespath does, with its
// functions powertools_json, powertools_base64 and powertools_base64_gzip:
// "powertools_json(body).[user_id, product_id]", or a multi-select such as
// `["refund_id","customer_id"]`. A string result is the key as it is; any
// other its canonical JSON text; a result MissingKey counts as missing is ""
// (ErrNoKey). Numbers keep their text. It panics if expr is not JMESPath
// (like regexp.MustCompile: expressions are constants).
func KeyJMESPath[In any](expr string) func(In) (string, error) {
	search := compileJMESPath(expr)
	return func(in In) (string, error) {
		v, err := search(in)
		if err != nil {
			return "", err
		}
		return keyText(v)
	}
}

// PayloadJMESPath returns a payload function picking the result of a
// JMESPath expression (as KeyJMESPath evaluates it) out of the input: only
// it must not change under one key, as Powertools'
// payload_validation_jmespath. It panics if expr is not JMESPath.
func PayloadJMESPath[In any](expr string) func(In) (any, error) {
	search := compileJMESPath(expr)
	return func(in In) (any, error) { return search(in) }
}

// compileJMESPath compiles expr with Powertools' functions, or panics.
func compileJMESPath(expr string) func(any) (any, error) {
	jp, err := jmespath.Compile(expr, powertoolsFunctions...)
	if err != nil {
		panic(fmt.Sprintf("idempotency: JMESPath %q: %v", expr, err))
	}
	return func(in any) (any, error) {
		v, err := jsonValue(in)
		if err != nil {
			return nil, err
		}
		v, err = jp.Search(doubles(v))
		if err != nil {
			return nil, fmt.Errorf("idempotency: JMESPath %q: %w", expr, err)
		}
		return v, nil
	}
}

// powertoolsFunctions are the JMESPath functions Powertools adds for
// envelopes: a JSON string parsed, a base64 string decoded, a base64
// string of gzip data decoded and decompressed.
var powertoolsFunctions = []jmespath.FunctionEntry{
	{Name: "powertools_json", Arguments: oneString, Handler: func(args []any) (any, error) {
		v, err := decode([]byte(args[0].(string)))
		if err != nil {
			return nil, fmt.Errorf("powertools_json: %w", err)
		}
		return doubles(v), nil
	}},
	{Name: "powertools_base64", Arguments: oneString, Handler: func(args []any) (any, error) {
		b, err := base64.StdEncoding.DecodeString(args[0].(string))
		if err != nil {
			return nil, fmt.Errorf("powertools_base64: %w", err)
		}
		return string(b), nil
	}},
	{Name: "powertools_base64_gzip", Arguments: oneString, Handler: func(args []any) (any, error) {
		b, err := base64.StdEncoding.DecodeString(args[0].(string))
		if err != nil {
			return nil, fmt.Errorf("powertools_base64_gzip: %w", err)
		}
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("powertools_base64_gzip: %w", err)
		}
		out, err := io.ReadAll(io.LimitReader(r, maxDecompressed+1))
		switch {
		case err != nil:
			return nil, fmt.Errorf("powertools_base64_gzip: %w", err)
		case len(out) > maxDecompressed:
			return nil, errors.New("powertools_base64_gzip: more than 6 MB decompressed")
		}
		return string(out), nil
	}},
}

// doubles turns the numbers of a decoded JSON value into float64, which
// JMESPath's comparisons and functions take, where a double holds the
// number exactly as written (5, 2.5, 0.1 as JSON means it); any other
// number (9007199254740993, 1e400) stays json.Number, so keys keep its text
// and two such numbers never become one key.
func doubles(v any) any {
	return mapNumbers(v, func(n json.Number) any {
		if f, ok := exactDouble(string(n)); ok {
			return f
		}
		return n
	})
}

// exactDouble parses a JSON number when the double nearest to it reads back
// as the same decimal value.
func exactDouble(s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f == 0 && strings.Trim(s, "-0.eE+") != "" { // out of range, or underflow to 0
		return 0, false
	}
	var a, b big.Rat
	if _, ok := a.SetString(s); !ok {
		return 0, false
	}
	if _, ok := b.SetString(strconv.FormatFloat(f, 'g', -1, 64)); !ok {
		return 0, false
	}
	return f, a.Cmp(&b) == 0
}

var oneString = []jmespath.ArgSpec{{Types: []jmespath.JpType{jmespath.JpString}}}

// maxDecompressed bounds powertools_base64_gzip: Lambda's largest payload.
const maxDecompressed = 6 << 20

// keyText is the key a value found in the input makes: "" when it is
// missing, a string as it is, anything else its JSON text (compact, object
// members sorted, numbers as written).
func keyText(v any) (string, error) {
	if MissingKey(v) {
		return "", nil
	}
	if s, ok := v.(string); ok {
		if !utf8.ValidString(s) {
			return "", errors.New("idempotency: key: a string is not UTF-8 text")
		}
		return s, nil
	}
	b, err := marshalText(v) // not json.Marshal: it writes each byte that is not UTF-8 as U+FFFD
	if err != nil {
		return "", fmt.Errorf("idempotency: key: %w", err)
	}
	return string(b), nil
}

// MissingKey reports whether a value found where the key should be counts
// as no key: null, "", or an array or object whose every element is
// missing (so an empty one, one of nulls, or a multi-select of absent
// fields). Powertools counts null, "", empty arrays and objects and arrays of
// nulls; nested ones here too, so keyless events never share one key such
// as ["",null]. 0 and false are keys.
func MissingKey(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case map[string]any:
		for _, e := range x {
			if !MissingKey(e) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range x {
			if !MissingKey(e) {
				return false
			}
		}
		return true
	}
	return false
}

// mapNumbers replaces, in place, every number of a decoded JSON value by
// f's answer for it.
func mapNumbers(v any, f func(json.Number) any) any {
	switch x := v.(type) {
	case json.Number:
		return f(x)
	case map[string]any:
		for k, e := range x {
			x[k] = mapNumbers(e, f)
		}
	case []any:
		for i, e := range x {
			x[i] = mapNumbers(e, f)
		}
	}
	return v
}

// jsonValue is in as its JSON reads: maps, slices, strings, json.Number,
// bools and nil.
func jsonValue(in any) (any, error) {
	b, err := marshalText(in)
	if err != nil {
		return nil, err
	}
	return decode(b)
}

// marshalText is v's JSON as encoding/json writes it, or an error when a
// string in v is not UTF-8: encoding/json writes each such byte as \ufffd,
// so "\xff" and "\xfe" would read as one value, and two payloads or keys as
// one. Only when its output holds that escape does the strict encoder
// (encoding/json's rules, invalid UTF-8 refused) look again: a JSON text
// of v (a json.RawMessage) may spell U+FFFD so itself.
func marshalText(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || !bytes.Contains(b, []byte(`\ufffd`)) {
		return b, err
	}
	if _, err := jsonv2.Marshal(v, jsonv1.DefaultOptionsV1(), jsontext.AllowInvalidUTF8(false)); err != nil {
		return nil, fmt.Errorf("a string is not UTF-8 text: %w", err)
	}
	return b, nil
}

// decode reads one JSON value (numbers as json.Number); text after it, or
// text that is not UTF-8, is an error, as in Powertools' json.loads.
func decode(b []byte) (any, error) {
	if !utf8.Valid(b) {
		return nil, errors.New("the JSON text is not UTF-8")
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // numbers keep their text, so keys and fingerprints do not round
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}
