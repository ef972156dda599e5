package idempotency

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/exactonce/exactonce/idempotency/canonjson"
)

// Options configure Wrap. Store is required.
type Options[In, Out any] struct {
	// Store keeps the keys: dynamostore.New(db, table), or a hosted
	// client.KeyStore.
	Store Persistence
	// Key derives the idempotency key from the input (KeyJMESPath reads it
	// from the JSON of the input, as Powertools' event_key_jmespath). nil:
	// the whole input is the key
	// (its canonical JSON, hashed), as Powertools does without
	// event_key_jmespath. A missing key ("", or what MissingKey counts as
	// missing) is ErrNoKey, unless RunWithoutKey.
	Key func(In) (string, error)
	// RunWithoutKey: when the input has no key, fn runs unguarded (no
	// record, no replay; the Outcome says NoKey) instead of ErrNoKey
	// (Powertools' raise_on_no_idempotency_key=False). Off by default.
	RunWithoutKey bool
	// Payload picks the part of the input that must not change under one
	// key; another value under a used key is ErrPayloadMismatch.
	// PayloadJMESPath picks parts of the JSON. nil: no
	// payload validation (as Powertools without
	// payload_validation_jmespath).
	Payload func(In) (any, error)
	// Namespace prefixes every key, so functions can share a table. "": the
	// wrapped function's name (package path and name; a closure's name is its
	// position in the enclosing function), after the Lambda function's name
	// when AWS_LAMBDA_FUNCTION_NAME is set, as Powertools prefixes keys.
	// Set it to keep keys across renames and refactors.
	Namespace string
	// Lease is how long a claim holds the key, independent of the
	// function's timeout. 0: until the invocation's deadline (the context's,
	// which in Lambda is the function's timeout, as Powertools uses the
	// remaining time), or DefaultLease without one. A holder that outlives
	// it can be taken over and then gets ErrLeaseLost; a claim answered
	// after half of it does not run the function (ErrInProgress, Late).
	Lease time.Duration
	// Release reports whether an error of the function releases the key;
	// nil: every error does (see Call.Release).
	Release func(error) bool
	// OnExecute runs once the key is claimed, before the function (a first
	// execution or a takeover).
	OnExecute func(ctx context.Context, key string)
	// OnReplay runs on every replay with the stored response and the end of
	// the record's retention (until then it replays; zero when the store
	// does not say it, as the hosted keys API does not), and returns the
	// response to give the caller (e.g. with a header saying it is a replay;
	// the stored one is unchanged). Its ctx answers IsReplay true.
	OnReplay func(ctx context.Context, key string, out Out, expiresAt time.Time) Out
	// Cache, when set, keeps completed records in memory: their replays cost
	// no request.
	Cache *Cache
	// HashKey, when set, makes payload fingerprints HMAC-SHA-256 under it, so
	// a table read reveals nothing by guessing payloads.
	HashKey []byte
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Wrap returns fn made idempotent under o: per key, fn runs once and its
// response is replayed, typed, to every later call (see the package
// documentation). Out must survive a JSON round trip (encoding/json); a
// response that cannot be encoded is ErrResponseNotStored and its key stays
// held. Wrap panics when o.Store is nil.
func Wrap[In, Out any](fn func(context.Context, In) (Out, error), o Options[In, Out]) func(context.Context, In) (Out, error) {
	if o.Store == nil {
		panic("idempotency: Options.Store is required")
	}
	if o.Key == nil {
		o.Key = wholeInput[In](o.HashKey)
	}
	if o.Namespace == "" {
		o.Namespace = defaultNamespace(fn)
	}
	// A Cache shared by several Wraps holds each one's records apart: a
	// key's record is its store's, and two Wraps of one function on two
	// stores (tables, prefixes) have one namespace.
	scope := strconv.FormatUint(wraps.Add(1), 10) + "/"
	return func(ctx context.Context, in In) (Out, error) {
		var zero Out
		if out := outcomeOf(ctx); out != nil {
			*out = Outcome{} // this call's alone: a ctx may serve several calls
		}
		key, err := o.Key(in)
		if err != nil {
			return zero, fmt.Errorf("idempotency: key: %w", err)
		}
		if key == "" && o.RunWithoutKey {
			if out := outcomeOf(ctx); out != nil {
				*out = Outcome{NoKey: true}
			}
			return fn(ownOutcome(ctx), in)
		}
		if key == "" {
			return zero, ErrNoKey
		}
		name := KeyName(o.Namespace, key)
		fp, err := o.fingerprint(in)
		if err != nil {
			return zero, err
		}
		if o.Cache != nil {
			if c, ok := o.Cache.get(scope+name, o.now()); ok {
				if c.fingerprint != fp {
					return zero, ErrPayloadMismatch
				}
				return o.replay(ctx, name, key, c.response, c.expiresAt, true)
			}
		}
		var first Out
		call := Call{Key: name, Fingerprint: fp, Lease: o.lease(ctx), Release: o.Release, Now: o.Now}
		res, err := Run(ctx, o.Store, call, func(ctx context.Context) ([]byte, error) {
			ctx = ownOutcome(ctx)
			if o.OnExecute != nil {
				o.OnExecute(ctx, key)
			}
			v, err := fn(ctx, in)
			if err != nil {
				return nil, err
			}
			first = v
			return encodeResponse(v)
		})
		if err != nil {
			return zero, err
		}
		if o.Cache != nil && res.Record != nil && !res.Record.CompletedAt.IsZero() {
			o.Cache.put(scope+name, fp, res.Response, o.now(), res.Record.ExpiresAt)
		}
		if res.Replayed {
			return o.replay(ctx, name, key, res.Response, res.Record.ExpiresAt, false)
		}
		if out := outcomeOf(ctx); out != nil {
			out.Key = name
		}
		return first, nil
	}
}

// wraps numbers the Wraps of this process: each one's scope in a Cache.
var wraps atomic.Uint64

// ownOutcome is ctx for the wrapped function: without the caller's Outcome,
// so a wrapped call the function makes with it (an idempotent call inside
// an idempotent handler) reports to that call's caller only, and the
// function never reads as a replay (IsReplay) while it runs.
func ownOutcome(ctx context.Context) context.Context {
	if outcomeOf(ctx) == nil {
		return ctx
	}
	return context.WithValue(ctx, outcomeKey{}, (*Outcome)(nil))
}

// encodeResponse is v's JSON. After the function ran, an encoding failure,
// a panicking MarshalJSON included, is ErrResponseNotStored: the key stays
// held rather than released by Run's panic handling.
func encodeResponse(v any) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: encode the response: panic: %v", ErrResponseNotStored, r)
		}
	}()
	// marshalText, not json.Marshal: a string that is not UTF-8 would be
	// stored (and replayed) as U+FFFD, other text than the first call got.
	if b, err = marshalText(v); err != nil {
		return nil, fmt.Errorf("%w: encode the response: %w", ErrResponseNotStored, err)
	}
	return b, nil
}

// lease is o.Lease, or the time left until ctx's deadline (0 without one:
// Run's DefaultLease).
func (o *Options[In, Out]) lease(ctx context.Context) time.Duration {
	if o.Lease > 0 {
		return o.Lease
	}
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 0
}

// defaultNamespace names fn: the Lambda function (when in one) and the Go
// function, in the characters a key name takes.
func defaultNamespace(fn any) string {
	name := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
	if lambda := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"); lambda != "" {
		name = lambda + "." + name
	}
	ns := strings.Map(func(r rune) rune {
		switch {
		case r == '/':
			return '.'
		case nameChar(r):
			return r
		}
		return '-'
	}, name)
	// The mapping loses what it replaced: two names of letters that are not
	// ASCII, or two instantiations of one generic function (whose names
	// the runtime gives as "f[...]"), would map to one namespace. Such a
	// name carries a digest of itself and of fn's type.
	if ns != strings.ReplaceAll(name, "/", ".") {
		sum := sha256.Sum256([]byte(name + "\x00" + reflect.TypeOf(fn).String()))
		ns += "~" + hex.EncodeToString(sum[:8])
	}
	return ns
}

// wholeInput is the default key: the fingerprint of the whole input, or ""
// when the input counts as missing (MissingKey).
func wholeInput[In any](hashKey []byte) func(In) (string, error) {
	return func(in In) (string, error) {
		v, err := jsonValue(in)
		if err != nil || MissingKey(v) {
			return "", err
		}
		return Fingerprint(v, hashKey)
	}
}

// replay decodes a stored response and runs the replay hook.
func (o *Options[In, Out]) replay(ctx context.Context, name, key string, stored []byte, expiresAt time.Time, fromCache bool) (Out, error) {
	var out Out
	if err := json.Unmarshal(stored, &out); err != nil {
		return out, fmt.Errorf("idempotency: decode the stored response: %w", err)
	}
	oc := outcomeOf(ctx)
	if oc == nil {
		ctx, oc = WithOutcome(ctx)
	}
	*oc = Outcome{Key: name, Replayed: true, FromCache: fromCache, ExpiresAt: expiresAt}
	if o.OnReplay != nil {
		out = o.OnReplay(ctx, key, out, expiresAt)
	}
	return out, nil
}

// fingerprint hashes the canonical JSON (RFC 8785) of the payload part of in.
func (o *Options[In, Out]) fingerprint(in In) (string, error) {
	var v any // no Payload: nothing to validate, one fingerprint for all
	if o.Payload != nil {
		var err error
		if v, err = o.Payload(in); err != nil {
			return "", fmt.Errorf("idempotency: payload: %w", err)
		}
	}
	return Fingerprint(v, o.HashKey)
}

func (o *Options[In, Out]) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Fingerprint is "sha256:" and the hex SHA-256 (HMAC-SHA-256 under hashKey
// when given) of v's canonical JSON: key order and spacing do not matter.
// It is the service's canonical form (package canonjson: RFC 8785, except
// that a number keeps its exact value), so 9007199254740993 and
// 9007199254740992, 0.1 and 0.10000000000000001, 1e400 and 2e999 never share
// a fingerprint. A string in v that is not UTF-8 is an error: JSON cannot
// tell its bytes apart.
func Fingerprint(v any, hashKey []byte) (string, error) {
	b, err := marshalText(v)
	if err != nil {
		return "", fmt.Errorf("idempotency: payload: %w", err)
	}
	canon, err := canonjson.Canonicalize(b)
	if err != nil {
		return "", fmt.Errorf("idempotency: payload: %w", err)
	}
	var sum []byte
	if len(hashKey) > 0 {
		m := hmac.New(sha256.New, hashKey)
		m.Write(canon)
		sum = m.Sum(nil)
	} else {
		s := sha256.Sum256(canon)
		sum = s[:]
	}
	return "sha256:" + hex.EncodeToString(sum), nil
}

// KeyName is the stored name of key under namespace: "namespace:key", or,
// when that is not 1–255 of [A-Za-z0-9._:~-] (what the hosted API takes),
// "sha256." and the hex SHA-256 of it, so any key works on every store.
func KeyName(namespace, key string) string {
	name := key
	if namespace != "" {
		name = namespace + ":" + key
	}
	if validName(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "sha256." + hex.EncodeToString(sum[:])
}
