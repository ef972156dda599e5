// Package secretkeys derives ExactOnce's keys from the server secret and uses
// them: the PIN HMAC, AES-256-GCM sealing of payloads, keyed fingerprints of
// request bodies, keyed digests of Idempotency-Keys (and the ids derived from
// them) and keyed hashes for logs. Each purpose has its own HKDF-derived key,
// so nothing stored or logged can be computed without the secret.
//
// The secret is either one string, or JSON {"current": "...", "previous":
// ["...", ...], "ids": "..."} during a rotation: payloads sealed, PINs hashed
// and fingerprints taken under any listed secret still work (each names its
// key set by a key id), and new material uses the current one. Ids derived
// from an Idempotency-Key and the stored digests of those keys must not change
// with a rotation, so they come from the "ids" secret (default: current),
// which the rotation procedure pins to the original secret.
package secretkeys

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strings"
)

// MinSecretLen is the shortest secret accepted (bytes).
const MinSecretLen = 32

// sealVersion is the first byte of every sealed payload.
const sealVersion = 1

// ErrOpen is returned when a sealed payload does not authenticate or names an
// unknown key: tampered data or a lost secret, never a wrong plaintext.
var ErrOpen = errors.New("secretkeys: payload cannot be opened")

// Keys holds the derived keys of every known secret, current first, and the
// rotation-stable naming key.
type Keys struct {
	sets  []keySet
	names []byte // HMAC key for Idempotency-Key digests and key-derived ids
}

type keySet struct {
	id      [4]byte // first bytes of SHA-256 of the payload key: names the set
	pin     []byte
	fp      []byte // request fingerprints
	log     []byte // hashes written to logs
	payload cipher.AEAD
}

// MaxPrevious bounds a rotation document's previous secrets: a hosted key's
// claim compares its fingerprint under every key set in one condition, and
// DynamoDB takes at most 100 values there. A rotation needs one.
const MaxPrevious = 10

// ParseSecret derives Keys from a secret string (see package doc).
func ParseSecret(secret string) (*Keys, error) {
	secrets := []string{secret}
	idSecret := secret
	if strings.HasPrefix(strings.TrimSpace(secret), "{") {
		var doc struct {
			Current  string   `json:"current"`
			Previous []string `json:"previous"`
			IDs      string   `json:"ids"`
		}
		if err := json.Unmarshal([]byte(secret), &doc); err != nil {
			return nil, errors.New(`secretkeys: secret JSON must be {"current": string, "previous": [string], "ids": string}`)
		}
		if len(doc.Previous) > MaxPrevious {
			return nil, fmt.Errorf("secretkeys: at most %d previous secrets (retire the oldest)", MaxPrevious)
		}
		secrets = append([]string{doc.Current}, doc.Previous...)
		idSecret = doc.Current
		if doc.IDs != "" {
			idSecret = doc.IDs
		}
	} else if mangledDocument(secret) {
		return nil, errors.New("secretkeys: the secret is a JSON document behind a byte-order mark or a quote, or encoded again as a JSON string: store the document itself")
	}
	k := &Keys{}
	for i, s := range append(secrets, idSecret) {
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("secretkeys: secret %d is shorter than %d bytes", i, MinSecretLen)
		}
	}
	for _, s := range secrets {
		set, err := derive([]byte(s))
		if err != nil {
			return nil, err
		}
		k.sets = append(k.sets, set)
	}
	names, err := hkdf.Key(sha256.New, []byte(idSecret), nil, "exactonce/v1/action-id", 32)
	if err != nil {
		return nil, fmt.Errorf("secretkeys: derive keys: %w", err)
	}
	k.names = names
	return k, nil
}

// mangledDocument reports whether secret is a rotation document that a
// tool mangled on its way in: behind byte-order marks, zero-width spaces or
// a shell's single quote it starts with {, or it is a JSON string (encoded
// once or more) whose text does. Taken as one secret, it would change every
// key at once, and the ids and key digests the rotation keeps.
func mangledDocument(secret string) bool {
	s := secret
	for range 8 {
		s = strings.TrimLeft(strings.TrimSpace(s), "\uFEFF\u200B'")
		var inner string
		if json.Unmarshal([]byte(s), &inner) != nil {
			break
		}
		s = inner
	}
	return strings.HasPrefix(s, "{")
}

func derive(secret []byte) (keySet, error) {
	var set keySet
	var err error
	key := func(purpose string) []byte {
		if err != nil {
			return nil
		}
		var out []byte
		out, err = hkdf.Key(sha256.New, secret, nil, "exactonce/v1/"+purpose, 32)
		return out
	}
	set.pin = key("pin")
	set.fp = key("fingerprint")
	set.log = key("log")
	payloadKey := key("payload")
	if err != nil {
		return set, fmt.Errorf("secretkeys: derive keys: %w", err)
	}
	block, err := aes.NewCipher(payloadKey)
	if err != nil {
		return set, err
	}
	if set.payload, err = cipher.NewGCM(block); err != nil {
		return set, err
	}
	sum := sha256.Sum256(payloadKey)
	copy(set.id[:], sum[:4])
	return set, nil
}

// KeyID names the current key set: stored on an action whose PIN or payload
// it protects, so a server can tell an item it cannot verify from a wrong PIN.
func (k *Keys) KeyID() string { return hex.EncodeToString(k.sets[0].id[:]) }

// KeyIDs names every known key set, current first.
func (k *Keys) KeyIDs() []string {
	out := make([]string, len(k.sets))
	for i, set := range k.sets {
		out[i] = hex.EncodeToString(set.id[:])
	}
	return out
}

// Knows reports whether id names a known key set ("" – no key – is known).
func (k *Keys) Knows(id string) bool {
	_, ok := k.set(id)
	return ok || id == ""
}

func (k *Keys) set(id string) (keySet, bool) {
	for _, set := range k.sets {
		if hex.EncodeToString(set.id[:]) == id {
			return set, true
		}
	}
	return keySet{}, false
}

// PINHash is HMAC-SHA-256 of actionID and pin under the current PIN key.
func (k *Keys) PINHash(actionID, pin string) []byte { return pinHash(k.sets[0].pin, actionID, pin) }

// PINMatches compares pin with a stored PIN hash made under key set keyID
// (under every known set when keyID is "", as for items written before key
// ids were stored), in constant time.
func (k *Keys) PINMatches(keyID string, stored []byte, actionID, pin string) bool {
	sets := k.sets
	if keyID != "" {
		set, ok := k.set(keyID)
		if !ok {
			return false
		}
		sets = []keySet{set}
	}
	match := false
	for _, set := range sets {
		match = hmac.Equal(stored, pinHash(set.pin, actionID, pin)) || match // no early exit
	}
	return match
}

func pinHash(key []byte, actionID, pin string) []byte {
	m := hmac.New(sha256.New, key)
	// Length-prefix the id so ("ab","c") and ("a","bc") never collide.
	fmt.Fprintf(m, "%d:%s:%s", len(actionID), actionID, pin)
	return m.Sum(nil)
}

// IdentDigest is a keyed digest of an Idempotency-Key under the naming key:
// a create without an actionId derives its id from it, so a retry lands on
// the same item, before and after a rotation, while the id stays unguessable.
func (k *Keys) IdentDigest(idempotencyKey string) []byte {
	return mac(k.names, "id\x00", idempotencyKey)
}

// KeyDigest is the stored form of an Idempotency-Key (or any caller-chosen
// name that must be compared but not kept): a keyed digest under the naming
// key, stable across rotations. 128 bits, hex.
func (k *Keys) KeyDigest(idempotencyKey string) string {
	return hex.EncodeToString(mac(k.names, "key\x00", idempotencyKey)[:16])
}

// A hosted key's fencing token is 16 bytes, hex: a random nonce and a MAC
// of the nonce and the key's item name under the naming key (stable across
// rotations, as a lease can outlive one). The item keeps only
// StoredTokenPrefix and the nonce, so a table read gives no token that
// completes or releases a key; a claim retried after its answer was lost
// gets its token back from the stored nonce (KeyToken).
const (
	tokenNonceLen = 8
	tokenMACLen   = 8
	// StoredTokenPrefix starts the stored form of every token NewKeyToken
	// makes; a caller's token (hex) never does.
	StoredTokenPrefix = "n:"
)

// NewKeyToken returns a fresh token for the hosted key item item, and the
// form its item stores.
func (k *Keys) NewKeyToken(item string) (token, stored string) {
	nonce := make([]byte, tokenNonceLen)
	_, _ = rand.Read(nonce)
	return k.keyToken(item, nonce), StoredTokenPrefix + hex.EncodeToString(nonce)
}

// KeyToken is the token whose stored form is stored. A stored form without
// StoredTokenPrefix is a token an item kept as sent (written before tokens
// were stored this way) and is its own token.
func (k *Keys) KeyToken(item, stored string) string {
	nonce, err := hex.DecodeString(strings.TrimPrefix(stored, StoredTokenPrefix))
	if !strings.HasPrefix(stored, StoredTokenPrefix) || err != nil || len(nonce) != tokenNonceLen {
		return stored
	}
	return k.keyToken(item, nonce)
}

// StoredKeyToken is what a write by the holder of token compares with the
// item's token: the stored form when token's MAC holds for item, else token
// as sent, which only an item that kept its token as sent can match.
func (k *Keys) StoredKeyToken(item, token string) string {
	raw, err := hex.DecodeString(token)
	if err != nil || len(raw) != tokenNonceLen+tokenMACLen {
		return token
	}
	nonce := raw[:tokenNonceLen]
	if !hmac.Equal([]byte(k.keyToken(item, nonce)), []byte(token)) {
		return token
	}
	return StoredTokenPrefix + hex.EncodeToString(nonce)
}

func (k *Keys) keyToken(item string, nonce []byte) string {
	m := mac(k.names, "token\x00"+item+"\x00", string(nonce))
	return hex.EncodeToString(append(append([]byte{}, nonce...), m[:tokenMACLen]...))
}

// Fingerprint is the stored fingerprint of a canonical request body: an HMAC
// under the current fingerprint key, prefixed by the key id ("kid:hex").
func (k *Keys) Fingerprint(body []byte) string { return fingerprint(k.sets[0], body) }

// Fingerprints is the body's fingerprint under every known key set, current
// first: a retry compares with whichever its first attempt stored.
func (k *Keys) Fingerprints(body []byte) []string {
	out := make([]string, len(k.sets))
	for i, set := range k.sets {
		out[i] = fingerprint(set, body)
	}
	return out
}

func fingerprint(set keySet, body []byte) string {
	m := hmac.New(sha256.New, set.fp)
	m.Write(body)
	return hex.EncodeToString(set.id[:]) + ":" + hex.EncodeToString(m.Sum(nil))
}

// KeyFingerprintPrefix starts a hosted key's fingerprint as stored
// ("~kid:hex"); one without it was stored as sent, before they were keyed.
const KeyFingerprintPrefix = "~"

// KeyFingerprints is a hosted key's fingerprint as its item stores it: an
// HMAC of the caller's fingerprint, bound to the key's item, under every
// known key set, current first. The caller's value (often a digest of the
// effect's parameters, taken without a key) is never stored.
func (k *Keys) KeyFingerprints(item, fp string) []string {
	out := make([]string, len(k.sets))
	for i, set := range k.sets {
		out[i] = KeyFingerprintPrefix + hex.EncodeToString(set.id[:]) + ":" + hex.EncodeToString(mac(set.fp, "key fingerprint\x00"+item+"\x00", fp))
	}
	return out
}

// KeyFingerprintID is the key set a stored hosted-key fingerprint was taken
// under, and false for one stored as sent.
func KeyFingerprintID(stored string) (string, bool) {
	rest, ok := strings.CutPrefix(stored, KeyFingerprintPrefix)
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, ":")
	return id, ok
}

// LogHash is a short keyed hash for log lines: it correlates the requests of
// one key without revealing the key, even to someone who can guess it.
func (k *Keys) LogHash(s string) string {
	return hex.EncodeToString(mac(k.sets[0].log, "", s)[:6])
}

func mac(key []byte, domain, s string) []byte {
	var m hash.Hash = hmac.New(sha256.New, key)
	m.Write([]byte(domain))
	m.Write([]byte(s))
	return m.Sum(nil)
}

// Seal encrypts plaintext with AES-256-GCM under the current payload key,
// binding it to actionID as associated data. Layout: version, key id (4),
// nonce (12), ciphertext+tag.
func (k *Keys) Seal(actionID string, plaintext []byte) []byte {
	set := k.sets[0]
	out := make([]byte, 0, 1+4+set.payload.NonceSize()+len(plaintext)+set.payload.Overhead())
	out = append(out, sealVersion)
	out = append(out, set.id[:]...)
	nonce := make([]byte, set.payload.NonceSize())
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails (Go 1.24+)
	out = append(out, nonce...)
	return set.payload.Seal(out, nonce, plaintext, []byte(actionID))
}

// SealedKeyID is the key id a sealed payload names ("" if it names none).
func SealedKeyID(sealed []byte) string {
	if len(sealed) < 5 || sealed[0] != sealVersion {
		return ""
	}
	return hex.EncodeToString(sealed[1:5])
}

// Open decrypts a payload sealed by Seal under any known key.
func (k *Keys) Open(actionID string, sealed []byte) ([]byte, error) {
	if len(sealed) < 5 || sealed[0] != sealVersion {
		return nil, ErrOpen
	}
	for _, set := range k.sets {
		if [4]byte(sealed[1:5]) != set.id {
			continue
		}
		ns := set.payload.NonceSize()
		if len(sealed) < 5+ns {
			return nil, ErrOpen
		}
		plain, err := set.payload.Open(nil, sealed[5:5+ns], sealed[5+ns:], []byte(actionID))
		if err != nil {
			return nil, ErrOpen
		}
		return plain, nil
	}
	return nil, ErrOpen
}

// NewDevelopmentSecret returns a random secret for a local server. Payloads
// sealed under it do not survive a restart unless it is saved.
func NewDevelopmentSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return fmt.Sprintf("dev-%x", b)
}
