package idempotency

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// KeyPath returns a key function reading path from the input's JSON. A path
// is dot-separated object members and array indexes ("body.order.id",
// "headers.idempotency-key", "Records.0.messageId"). A string met before the
// path ends is parsed as JSON and the path goes on inside it, so
// "body.orderId" reads into an API Gateway event's JSON body. A string value
// is the key as it is; any other value is its JSON text. A
// missing value, or one MissingKey counts as missing, is "" (ErrNoKey).
// For JMESPath, as Powertools' event_key_jmespath takes it, use KeyJMESPath.
func KeyPath[In any](path string) func(In) (string, error) {
	return func(in In) (string, error) {
		v, err := lookup(in, path)
		if err != nil {
			return "", err
		}
		return keyText(v)
	}
}

// keyText is the key a value found in the input makes: "" when it is
// missing, a string as it is, anything else its JSON text (compact, object
// members sorted, numbers as written).
func keyText(v any) (string, error) {
	if MissingKey(v) {
		return "", nil
	}
	if s, ok := v.(string); ok {
		return s, nil
	}
	b, err := json.Marshal(v)
	return string(b), err
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

// PayloadPaths returns a payload function picking paths (as KeyPath reads
// them) out of the input's JSON: only they must not change under one key.
func PayloadPaths[In any](paths ...string) func(In) (any, error) {
	return func(in In) (any, error) {
		out := make([]any, len(paths))
		for i, p := range paths {
			v, err := lookup(in, p)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
}

// lookup walks path through the JSON of in; nil when something on the way is
// missing.
func lookup(in any, path string) (any, error) {
	v, err := jsonValue(in)
	if err != nil {
		return nil, err
	}
	if path == "" {
		return v, nil
	}
	for _, seg := range strings.Split(path, ".") {
		if s, ok := v.(string); ok { // embedded JSON (an API Gateway body)
			if v, err = decode([]byte(s)); err != nil {
				return nil, fmt.Errorf("idempotency: path %q: %q is not JSON", path, seg)
			}
		}
		switch x := v.(type) {
		case map[string]any:
			v = x[seg]
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil, nil
			}
			v = x[i]
		default:
			return nil, nil
		}
	}
	return v, nil
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
	b, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	return decode(b)
}

func decode(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // numbers keep their text, so keys and fingerprints do not round
	var v any
	err := d.Decode(&v)
	return v, err
}
