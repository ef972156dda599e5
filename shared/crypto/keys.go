// Package crypto derives ExactOnce's keys from the server secret and uses
// them: the PIN HMAC, ids derived from Idempotency-Keys, and AES-256-GCM
// sealing of payloads. Each purpose has its own HKDF-derived key.
//
// The secret is either one string, or JSON {"current": "...", "previous":
// ["...", ...]} during a rotation: payloads sealed under any listed secret
// still open (the ciphertext names its key), PINs hashed under any listed
// secret still match, and new material uses the current one.
package crypto

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// MinSecretLen is the shortest secret accepted (bytes).
const MinSecretLen = 32

// sealVersion is the first byte of every sealed payload.
const sealVersion = 1

// ErrOpen is returned when a sealed payload does not authenticate or names an
// unknown key: tampered data or a lost secret, never a wrong plaintext.
var ErrOpen = errors.New("crypto: payload cannot be opened")

// Keys holds the derived keys of every known secret, current first.
type Keys struct{ sets []keySet }

type keySet struct {
	id      [4]byte // first bytes of SHA-256 of the payload key: names it in ciphertexts
	pin     []byte
	ident   []byte
	payload cipher.AEAD
}

// ParseSecret derives Keys from a secret string (see package doc).
func ParseSecret(secret string) (*Keys, error) {
	secrets := []string{secret}
	if strings.HasPrefix(strings.TrimSpace(secret), "{") {
		var doc struct {
			Current  string   `json:"current"`
			Previous []string `json:"previous"`
		}
		if err := json.Unmarshal([]byte(secret), &doc); err != nil {
			return nil, errors.New("crypto: secret JSON must be {\"current\": string, \"previous\": [string]}")
		}
		secrets = append([]string{doc.Current}, doc.Previous...)
	}
	k := &Keys{}
	for i, s := range secrets {
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("crypto: secret %d is shorter than %d bytes", i, MinSecretLen)
		}
		set, err := derive([]byte(s))
		if err != nil {
			return nil, err
		}
		k.sets = append(k.sets, set)
	}
	return k, nil
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
	set.ident = key("action-id")
	payloadKey := key("payload")
	if err != nil {
		return set, fmt.Errorf("crypto: derive keys: %w", err)
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

// PINHash is HMAC-SHA-256 of actionID and pin under the current PIN key.
func (k *Keys) PINHash(actionID, pin string) []byte { return pinHash(k.sets[0].pin, actionID, pin) }

// PINHashes is the PIN's HMAC under every known secret, current first, so a
// PIN set before a rotation still matches.
func (k *Keys) PINHashes(actionID, pin string) [][]byte {
	out := make([][]byte, len(k.sets))
	for i, set := range k.sets {
		out[i] = pinHash(set.pin, actionID, pin)
	}
	return out
}

func pinHash(key []byte, actionID, pin string) []byte {
	m := hmac.New(sha256.New, key)
	// Length-prefix the id so ("ab","c") and ("a","bc") never collide.
	fmt.Fprintf(m, "%d:%s:%s", len(actionID), actionID, pin)
	return m.Sum(nil)
}

// IdentDigest is a keyed digest of an Idempotency-Key under the current
// secret: a create without an actionId derives its id from it, so a retry
// lands on the same item while the id stays unguessable.
func (k *Keys) IdentDigest(idempotencyKey string) []byte {
	m := hmac.New(sha256.New, k.sets[0].ident)
	m.Write([]byte(idempotencyKey))
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
