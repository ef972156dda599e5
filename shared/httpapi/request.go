package httpapi

import (
	"encoding/base64"
	"errors"
	"reflect"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/exactonce/exactonce/idempotency/canonjson"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/secretkeys"
)

// MaxBodyBytes bounds a request body; larger bodies get 413 before parsing.
// It leaves room for a 16 KiB payload escaped in JSON plus the other fields.
const MaxBodyBytes = 64 << 10

// MaxKeyLen bounds the Idempotency-Key header.
const MaxKeyLen = 255

// request is the decoded, validated envelope of one API call. Nothing in it
// that is stored or logged can be computed without the server secret.
type request struct {
	body   []byte // raw JSON ("{}" for an empty body)
	rawKey string // Idempotency-Key as sent (bare form), "" when absent: never stored
	canon  []byte // canonical JSON of the body
	// key is the stored form of the Idempotency-Key: its keyed digest.
	key string
	// fingerprint is the body's keyed fingerprint under the current key set,
	// fingerprints under every known set (a retry after a rotation matches).
	fingerprint  string
	fingerprints []string
}

// write is the record of this request an operation stores.
func (r *request) write(requestID string) action.Write {
	return action.Write{Key: r.key, Fingerprint: r.fingerprint, RequestID: requestID}
}

// errTooLarge marks a body over MaxBodyBytes.
var errTooLarge = errors.New("request body too large")

// readRequest extracts the body (at most limit bytes; an empty body reads as
// {} when emptyOK) and the Idempotency-Key of an API Gateway event, and
// decodes the body strictly into v, fingerprinting it with keys.
func readRequest(ev *events.APIGatewayV2HTTPRequest, keys *secretkeys.Keys, emptyOK bool, limit int, v any) (*request, error) {
	raw := []byte(ev.Body)
	if ev.IsBase64Encoded {
		if base64.StdEncoding.DecodedLen(len(ev.Body)) > limit+3 {
			return nil, errTooLarge
		}
		var err error
		if raw, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
			return nil, &action.InvalidError{Field: "body", Message: "is not valid base64"}
		}
	}
	if len(raw) > limit {
		return nil, errTooLarge
	}
	if len(strings.TrimSpace(string(raw))) == 0 {
		if !emptyOK {
			return nil, &action.InvalidError{Field: "body", Message: "is required"}
		}
		raw = []byte("{}")
	}
	r := &request{body: raw}
	if h, ok := header(ev, "idempotency-key"); ok {
		k, err := parseKey(h)
		if err != nil {
			return nil, err
		}
		r.rawKey, r.key = k, keys.KeyDigest(k)
	}
	if err := r.decode(v); err != nil {
		return nil, err
	}
	r.fingerprint, r.fingerprints = keys.Fingerprint(r.canon), keys.Fingerprints(r.canon)
	return r, nil
}

// parseKey reads an Idempotency-Key header: the bare form (8e03978e-40d5)
// or, as the IETF draft sends it, a Structured Field string
// ("8e03978e-40d5", with \" and \\ escapes). Both forms of one key are the
// same key. A header sent more than once is refused (sentTwice).
func parseKey(h string) (string, error) {
	if sentTwice(h) {
		return "", &action.InvalidError{Field: "Idempotency-Key", Message: "was sent more than once; send it once"}
	}
	k, ok := keyForm(h)
	if !ok || k == "" || len(k) > MaxKeyLen || !printableASCII(k) {
		return "", &action.InvalidError{Field: "Idempotency-Key",
			Message: `must be 1 to 255 printable ASCII characters, bare or as a quoted string ("...")`}
	}
	return k, nil
}

// keyForm is the key a header value names, bare or quoted; false for a
// quoted string that does not parse.
func keyForm(h string) (string, bool) {
	if !strings.HasPrefix(h, `"`) {
		return h, true
	}
	if len(h) < 2 || !strings.HasSuffix(h, `"`) {
		return "", false
	}
	var out strings.Builder
	inner := h[1 : len(h)-1]
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case c == '\\' && i+1 < len(inner) && (inner[i+1] == '"' || inner[i+1] == '\\'):
			i++
			out.WriteByte(inner[i])
		case c == '\\' || c == '"':
			return "", false
		default:
			out.WriteByte(c)
		}
	}
	return out.String(), true
}

// sentTwice reports whether h is what API Gateway makes of the header sent
// more than once, naming one key: it joins the values with commas. h is cut
// at every n-th comma for each n that divides the commas evenly; if every
// piece (spaces around it dropped) is that key, bare or quoted, or empty
// (an empty header beside it), the header was repeated: as a key of its own
// it would make a retry whose client repeated the header a new call,
// performed again. Any other value with commas is a key of its own.
func sentTwice(h string) bool {
	var commas []int
	for i := range len(h) {
		if h[i] == ',' {
			commas = append(commas, i)
		}
	}
	for n := 1; n <= len(commas); n++ {
		if (len(commas)+1)%n != 0 {
			continue
		}
		key, start, same := "", 0, true
		for c := n - 1; same && c <= len(commas); c += n {
			end := len(h)
			if c < len(commas) {
				end = commas[c]
			}
			piece := strings.Trim(h[start:end], " \t")
			start = end + 1
			k, ok := keyForm(piece)
			switch {
			case piece == "":
			case !ok || k == "" || key != "" && k != key:
				same = false
			default:
				key = k
			}
		}
		if same && key != "" {
			return true
		}
	}
	return false
}

// decode parses the body strictly into v: one JSON object, no unknown or
// duplicate members, valid UTF-8, right types. Errors name the field.
func (r *request) decode(v any) error {
	// RFC 8785 with numbers kept exact: two bodies are one request only if
	// every number in them has the same value (1.0 and 1e0 do; 2^53+1 and
	// 2^53, 0 and -0 do not).
	c, err := canonjson.Canonicalize(r.body)
	if err != nil {
		return fieldError(err)
	}
	canon := jsontext.Value(c)
	if canon.Kind() != '{' {
		return &action.InvalidError{Field: "body", Message: "must be a JSON object"}
	}
	if err := json.Unmarshal(r.body, v, json.RejectUnknownMembers(true), noNull); err != nil {
		return fieldError(err)
	}
	r.canon = canon
	return nil
}

// noEmpty refuses "" for each of names that the body holds: those members
// take 1 character or more (api/openapi.yaml), and "" is no value of them,
// not their absence (a create's "pin":"" is not an action without a PIN).
// Leave a member out for its default.
func (r *request) noEmpty(names ...string) error {
	var members map[string]jsontext.Value
	if err := json.Unmarshal(r.canon, &members); err != nil {
		return &action.InvalidError{Field: "body", Message: "must be a JSON object"}
	}
	for _, name := range names {
		if v, ok := members[name]; ok && string(v) == `""` {
			return &action.InvalidError{Field: name, Message: "must not be empty: leave it out for the default"}
		}
	}
	return nil
}

// errNull marks a null where a member takes no null.
var errNull = errors.New("null")

// anyJSON is the type of the members that take any JSON value (a payload,
// a key's response): null is one of those values.
var anyJSON = reflect.TypeFor[*jsontext.Value]()

// noNull is the API's one rule for null: a member is a value of its type
// or absent. null is refused (400 naming the member, at any depth) rather
// than taken as absent, which would give a default the caller did not
// choose and a body that fingerprints apart from the same call without the
// member. Where any JSON value is taken, null is that value.
var noNull = json.WithUnmarshalers(json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v any) error {
	if dec.PeekKind() == 'n' && reflect.TypeOf(v) != anyJSON {
		return errNull
	}
	return errors.ErrUnsupported // decode as usual
}))

// query reads a route's query parameters: each of names is absent or holds
// a value. Sent empty (?cursor=) it is 400 naming it, like any value it
// does not take: an empty cursor is no cursor a page returned.
func query(ev *events.APIGatewayV2HTTPRequest, names ...string) (map[string]string, error) {
	q := ev.QueryStringParameters
	for _, name := range names {
		if v, ok := q[name]; ok && v == "" {
			return nil, &action.InvalidError{Field: name, Message: "must not be empty: leave it out for the default"}
		}
	}
	return q, nil
}

// pageLimit reads the query's "limit": def when it is absent, else a whole
// number from 1 to most (400 naming limit otherwise).
func pageLimit(q map[string]string, def, most int) (int, error) {
	v, ok := q["limit"]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, &action.InvalidError{Field: "limit", Message: "must be a whole number from 1 to " + strconv.Itoa(most)}
	}
	return n, nil
}

// fieldError turns a JSON error into an InvalidError naming the member at
// fault, without echoing the offending value (it may be a secret).
func fieldError(err error) error {
	var sem *json.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case errors.As(err, &sem):
		field, _ := pointerField(sem.JSONPointer)
		if errors.Is(sem.Err, json.ErrUnknownName) {
			return &action.InvalidError{Field: field, Message: "is not a known field"}
		}
		if errors.Is(sem.Err, errNull) {
			if field == "" {
				field = "body"
			}
			return &action.InvalidError{Field: field, Message: "must not be null: leave it out for the default"}
		}
		want := "a valid value"
		if sem.GoType != nil {
			want = kindName(sem.GoType.Kind().String())
		}
		return &action.InvalidError{Field: field, Message: "must be " + want}
	case errors.As(err, &syn):
		field, inside := pointerField(syn.JSONPointer)
		msg := "is not valid JSON"
		switch {
		case errors.Is(syn.Err, jsontext.ErrDuplicateName) && inside:
			msg = "has a member that appears more than once"
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			msg = "appears more than once"
		case strings.Contains(syn.Err.Error(), "UTF-8"):
			msg = "contains invalid UTF-8"
		case strings.Contains(syn.Err.Error(), "depth"):
			msg = "is nested too deeply"
		}
		if field == "" {
			field = "body"
		}
		return &action.InvalidError{Field: field, Message: msg}
	}
	return &action.InvalidError{Field: "body", Message: "is not valid JSON"}
}

// Bounds on the field an error names: a body may nest 10,000 levels deep
// or hold a 60 KB member name, an error body stays small.
const (
	maxFieldSegments   = 4
	maxFieldSegmentLen = 64
)

// secretMembers hold a value kept secret (a create's payload, a key's
// response): the names of the members inside one are part of the secret.
var secretMembers = map[string]bool{"payload": true, "response": true}

// pointerField renders a JSON Pointer (/metadata/a) as a dotted field name,
// bounded: at most maxFieldSegments segments of at most maxFieldSegmentLen
// bytes each, a cut marked with "…". A pointer into a secret member names
// that member alone, and inside says so.
func pointerField(p jsontext.Pointer) (field string, inside bool) {
	var parts []string
	for tok := range p.Tokens() {
		if len(parts) == 1 && secretMembers[parts[0]] {
			return parts[0], true
		}
		if len(parts) == maxFieldSegments {
			parts[len(parts)-1] = "…"
			break
		}
		if len(tok) > maxFieldSegmentLen {
			tok = strings.ToValidUTF8(tok[:maxFieldSegmentLen], "") + "…"
		}
		parts = append(parts, tok)
	}
	return strings.Join(parts, "."), false
}

func kindName(k string) string {
	switch k {
	case "string":
		return "a string"
	case "int", "int64", "ptr":
		return "an integer"
	case "map":
		return "an object of strings"
	case "slice":
		return "a JSON value"
	}
	return "of another type"
}

// header returns a header by lower-case name; API Gateway v2 lower-cases them.
func header(ev *events.APIGatewayV2HTTPRequest, name string) (string, bool) {
	for k, v := range ev.Headers {
		if strings.EqualFold(k, name) {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// headerOr is the header's value, "" when absent.
func headerOr(ev *events.APIGatewayV2HTTPRequest, name string) string {
	v, _ := header(ev, name)
	return v
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
