package secretkeys

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

const s1 = "secret-one-0123456789abcdefghijklmnopqrstuvwxyz"
const s2 = "secret-two-0123456789abcdefghijklmnopqrstuvwxyz"

func mustKeys(t *testing.T, s string) *Keys {
	t.Helper()
	k, err := ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k := mustKeys(t, s1)
	sealed := k.Seal("a1", []byte(`{"code":"X"}`))
	if bytes.Contains(sealed, []byte("code")) {
		t.Fatal("plaintext visible in ciphertext")
	}
	got, err := k.Open("a1", sealed)
	if err != nil || string(got) != `{"code":"X"}` {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := k.Open("a2", sealed); !errors.Is(err, ErrOpen) {
		t.Fatalf("other actionId opened: %v", err)
	}
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 1
		if _, err := k.Open("a1", bad); !errors.Is(err, ErrOpen) {
			t.Fatalf("flipped byte %d opened: %v", i, err)
		}
	}
}

func TestRotation(t *testing.T) {
	old := mustKeys(t, s1)
	sealed := old.Seal("a", []byte("p"))
	pin := old.PINHash("a", "1234")

	rotated := mustKeys(t, `{"current":"`+s2+`","previous":["`+s1+`"]}`)
	if got, err := rotated.Open("a", sealed); err != nil || string(got) != "p" {
		t.Fatalf("old payload after rotation: %q %v", got, err)
	}
	if !rotated.PINMatches(old.KeyID(), pin, "a", "1234") || !rotated.PINMatches("", pin, "a", "1234") {
		t.Fatal("a PIN hashed under the previous secret no longer matches")
	}
	if rotated.PINMatches(rotated.KeyID(), pin, "a", "1234") || rotated.PINMatches(old.KeyID(), pin, "a", "9999") {
		t.Fatal("PINMatches matched under the wrong key set or with a wrong PIN")
	}
	if bytes.Equal(rotated.PINHash("a", "1234"), pin) {
		t.Fatal("new PINs must be hashed under the current secret")
	}
	if _, err := mustKeys(t, s2).Open("a", sealed); !errors.Is(err, ErrOpen) {
		t.Fatal("a key that was dropped still opens")
	}
}

func TestPINHashSeparation(t *testing.T) {
	k := mustKeys(t, s1)
	if bytes.Equal(k.PINHash("ab", "c1234"), k.PINHash("abc", "1234")) {
		t.Fatal("actionId/PIN boundary is ambiguous")
	}
	if bytes.Equal(k.PINHash("a", "1234"), k.IdentDigest("1234")) {
		t.Fatal("PIN and id keys are not separate")
	}
}

func TestParseSecretRejectsShort(t *testing.T) {
	for _, s := range []string{"", "short", `{"current":"short"}`, `{"current":`} {
		if _, err := ParseSecret(s); err == nil {
			t.Errorf("ParseSecret(%q) accepted", s)
		}
	}
}

// TestKeyToken: a hosted key's token is recomputed from its stored form only
// with the naming key, verifies only for its item, and survives a rotation
// that pins the ids secret.
func TestKeyToken(t *testing.T) {
	k := mustKeys(t, s1)
	tok, stored := k.NewKeyToken("key#pay")
	if len(tok) != 32 || strings.Contains(stored, tok) || !strings.HasPrefix(stored, StoredTokenPrefix) {
		t.Fatalf("token %q, stored %q", tok, stored)
	}
	if got := k.StoredKeyToken("key#pay", tok); got != stored {
		t.Fatalf("StoredKeyToken = %q, want %q", got, stored)
	}
	if got := k.KeyToken("key#pay", stored); got != tok {
		t.Fatalf("KeyToken = %q, want %q", got, tok)
	}
	rotated := mustKeys(t, `{"current":"`+s2+`","previous":["`+s1+`"],"ids":"`+s1+`"}`)
	if rotated.StoredKeyToken("key#pay", tok) != stored {
		t.Fatal("a token does not survive a rotation that pins ids")
	}
	// Anything else is returned as sent: it can match only an item that
	// kept a token as sent, never a stored form.
	other := mustKeys(t, s2)
	flipped := []byte(tok)
	flipped[31] ^= 1
	for _, c := range []struct {
		keys      *Keys
		item, tok string
	}{
		{k, "key#other", tok}, {other, "key#pay", tok}, {k, "key#pay", string(flipped)},
		{k, "key#pay", stored}, {k, "key#pay", "0123456789abcdef0123456789abcdef"}, {k, "key#pay", "zz"},
	} {
		if got := c.keys.StoredKeyToken(c.item, c.tok); got != c.tok {
			t.Errorf("StoredKeyToken(%q, %q) = %q, want the token as sent", c.item, c.tok, got)
		}
	}
	if got := k.KeyToken("key#pay", "0123456789abcdef0123456789abcdef"); got != "0123456789abcdef0123456789abcdef" {
		t.Errorf("a token stored as sent: KeyToken = %q", got)
	}
}

// TestParseSecretBoundsPrevious: a rotation document holds at most
// MaxPrevious previous secrets. A hosted key's claim compares its
// fingerprint under every key set in one DynamoDB condition, which takes at
// most 100 values: with 100 previous secrets every claim failed (500).
func TestParseSecretBoundsPrevious(t *testing.T) {
	doc := func(n int) string {
		prev := make([]string, n)
		for i := range prev {
			prev[i] = fmt.Sprintf("%q", fmt.Sprintf("previous-secret-number-%04d-of-the-rotation", i))
		}
		return `{"current":"the-current-secret-of-the-rotation-00","previous":[` + strings.Join(prev, ",") + `]}`
	}
	if k, err := ParseSecret(doc(MaxPrevious)); err != nil || len(k.KeyIDs()) != MaxPrevious+1 {
		t.Fatalf("%d previous: %v", MaxPrevious, err)
	}
	if _, err := ParseSecret(doc(MaxPrevious + 1)); err == nil || !strings.Contains(err.Error(), "previous") {
		t.Fatalf("%d previous: %v, want refused naming previous", MaxPrevious+1, err)
	}
}
