package idempotency

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/exactonce/exactonce/shared/idemkey"
)

// Options configure Wrap. Store and Key are required.
type Options[In, Out any] struct {
	// Store keeps the keys: dynamostore.New(db, table), or a hosted
	// client.KeyStore.
	Store Persistence
	// Key derives the idempotency key from the input (KeyPath reads it from
	// the JSON of the input). "" is ErrNoKey.
	Key func(In) (string, error)
	// Payload picks the part of the input that must not change under one
	// key; another value under a used key is ErrPayloadMismatch. nil: the
	// whole input. PayloadPaths picks JSON paths.
	Payload func(In) (any, error)
	// Namespace prefixes every key (e.g. the function's name), so functions
	// can share a table.
	Namespace string
	// Lease is how long a claim holds the key, independent of the
	// function's timeout; 0: DefaultLease. A holder that outlives it can be
	// taken over and then gets ErrLeaseLost.
	Lease time.Duration
	// Release reports whether an error of the function releases the key;
	// nil: every error does (see Call.Release).
	Release func(error) bool
	// OnExecute runs once the key is claimed, before the function (a first
	// execution or a takeover).
	OnExecute func(ctx context.Context, key string)
	// OnReplay runs on every replay with the stored response and returns the
	// response to give the caller (e.g. with a header saying it is a replay;
	// the stored one is unchanged). Its ctx answers IsReplay true.
	OnReplay func(ctx context.Context, key string, out Out) Out
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
// documentation). Out must survive a JSON round trip (encoding/json).
// Wrap panics when o.Store or o.Key is nil.
func Wrap[In, Out any](fn func(context.Context, In) (Out, error), o Options[In, Out]) func(context.Context, In) (Out, error) {
	if o.Store == nil || o.Key == nil {
		panic("idempotency: Options.Store and Options.Key are required")
	}
	return func(ctx context.Context, in In) (Out, error) {
		var zero Out
		key, err := o.Key(in)
		if err != nil {
			return zero, fmt.Errorf("idempotency: key: %w", err)
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
			if c, ok := o.Cache.get(name, o.now()); ok {
				if c.fingerprint != fp {
					return zero, ErrPayloadMismatch
				}
				return o.replay(ctx, name, key, c.response, true)
			}
		}
		var first Out
		res, err := Run(ctx, o.Store, Call{Key: name, Fingerprint: fp, Lease: o.Lease, Release: o.Release, Now: o.Now},
			func(ctx context.Context) ([]byte, error) {
				if o.OnExecute != nil {
					o.OnExecute(ctx, key)
				}
				v, err := fn(ctx, in)
				if err != nil {
					return nil, err
				}
				first = v
				b, err := json.Marshal(v)
				if err != nil {
					return nil, fmt.Errorf("idempotency: encode the response: %w", err)
				}
				return b, nil
			})
		if err != nil {
			return zero, err
		}
		if o.Cache != nil && res.Record != nil && !res.Record.CompletedAt.IsZero() {
			o.Cache.put(name, fp, res.Response, o.now(), res.Record.ExpiresAt)
		}
		if res.Replayed {
			return o.replay(ctx, name, key, res.Response, false)
		}
		if out := outcomeOf(ctx); out != nil {
			out.Key = name
		}
		return first, nil
	}
}

// replay decodes a stored response and runs the replay hook.
func (o *Options[In, Out]) replay(ctx context.Context, name, key string, stored []byte, fromCache bool) (Out, error) {
	var out Out
	if err := json.Unmarshal(stored, &out); err != nil {
		return out, fmt.Errorf("idempotency: decode the stored response: %w", err)
	}
	oc := outcomeOf(ctx)
	if oc == nil {
		ctx, oc = WithOutcome(ctx)
	}
	*oc = Outcome{Key: name, Replayed: true, FromCache: fromCache}
	if o.OnReplay != nil {
		out = o.OnReplay(ctx, key, out)
	}
	return out, nil
}

// fingerprint hashes the canonical JSON (RFC 8785) of the payload part of in.
func (o *Options[In, Out]) fingerprint(in In) (string, error) {
	var v any = in
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
func Fingerprint(v any, hashKey []byte) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("idempotency: payload: %w", err)
	}
	canon := jsontext.Value(b)
	if err := canon.Canonicalize(); err != nil {
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
	if idemkey.ValidateName(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "sha256." + hex.EncodeToString(sum[:])
}
