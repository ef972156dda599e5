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
// is the key as it is; any other value is its canonical JSON text. A
// missing or null value is "" (ErrNoKey).
func KeyPath[In any](path string) func(In) (string, error) {
	return func(in In) (string, error) {
		v, err := lookup(in, path)
		if err != nil || v == nil {
			return "", err
		}
		if s, ok := v.(string); ok {
			return s, nil
		}
		b, err := json.Marshal(v)
		return string(b), err
	}
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
	b, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	v, err := decode(b)
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

func decode(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // numbers keep their text, so keys and fingerprints do not round
	var v any
	err := d.Decode(&v)
	return v, err
}
