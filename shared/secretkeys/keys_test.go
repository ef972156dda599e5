package secretkeys

import (
	"bytes"
	"errors"
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
