package secretkeys

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestProviderPicksUpRotation(t *testing.T) {
	secret, reads, fail := s1, 0, false
	src := func(context.Context) (string, error) {
		reads++
		if fail {
			return "", errors.New("secrets manager down")
		}
		return secret, nil
	}
	now := time.Now()
	ctx := context.Background()
	p, err := NewProvider(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	now = time.Now() // after the first read
	p.Now = func() time.Time { return now }
	one := p.Keys(ctx).KeyID()

	// A warm function picks up a rotation once Refresh has passed, not before.
	secret = `{"current":"` + s2 + `","previous":["` + s1 + `"]}`
	now = now.Add(p.Refresh - time.Second)
	if p.Keys(ctx).KeyID() != one || reads != 1 {
		t.Fatalf("re-read before Refresh: %d reads", reads)
	}
	now = now.Add(time.Second)
	two := p.Keys(ctx).KeyID()
	if two == one || reads != 2 {
		t.Fatalf("not picked up after Refresh: %d reads", reads)
	}

	// An unknown key id makes it re-read, at most once per MinGap.
	three := mustKeys(t, `{"current":"secret-three-0123456789abcdefghijklmnopqr","previous":["`+s2+`"]}`)
	if _, ok := p.Learn(ctx, three.KeyID()); ok || reads != 3 {
		t.Fatalf("unknown id: known=%v after %d reads", ok, reads)
	}
	secret = `{"current":"secret-three-0123456789abcdefghijklmnopqr","previous":["` + s2 + `"]}`
	if _, ok := p.Learn(ctx, three.KeyID()); ok || reads != 3 {
		t.Fatal("re-read within MinGap")
	}
	now = now.Add(p.MinGap)
	if k, ok := p.Learn(ctx, three.KeyID()); !ok || reads != 4 || !k.Knows(two) {
		t.Fatalf("not learned after MinGap: %v, %d reads", ok, reads)
	}

	// A failing source keeps the keys it has.
	fail = true
	now = now.Add(p.Refresh)
	if p.Keys(ctx).KeyID() != three.KeyID() {
		t.Fatal("lost the keys on a failed refresh")
	}
}

func TestIdsAndDigestsSurviveRotation(t *testing.T) {
	before := mustKeys(t, s1)
	during := mustKeys(t, `{"current":"`+s2+`","previous":["`+s1+`"],"ids":"`+s1+`"}`)
	after := mustKeys(t, `{"current":"`+s2+`","ids":"`+s1+`"}`)
	for _, k := range []*Keys{during, after} {
		if !bytes.Equal(k.IdentDigest("key-1"), before.IdentDigest("key-1")) || k.KeyDigest("key-1") != before.KeyDigest("key-1") {
			t.Fatal("ids or key digests changed with the rotation")
		}
	}
	if before.KeyDigest("key-1") == before.KeyDigest("key-2") {
		t.Fatal("digests collide")
	}
	fp := before.Fingerprint([]byte(`{}`))
	if !slices.Contains(during.Fingerprints([]byte(`{}`)), fp) || slices.Contains(after.Fingerprints([]byte(`{}`)), fp) {
		t.Fatal("a fingerprint must match under every listed secret and only those")
	}
}

// TestMangledRotationDocumentKeepsTheKeys: a rotation document that a tool
// mangled on its way into Secrets Manager (a byte-order mark, a zero-width
// space or a shell's quotes around it, or the whole document encoded again as
// a JSON string, once or more) is refused, not taken
// as a new single secret: that would change every id and key digest at
// once, so a keyed re-send across the refresh would act again. A warm
// function keeps the keys it has; a cold start fails, saying why.
func TestMangledRotationDocumentKeepsTheKeys(t *testing.T) {
	doc := `{"current":"` + s2 + `","previous":["` + s1 + `"],"ids":"` + s1 + `"}`
	for name, mangled := range map[string]string{
		"byte-order mark":     "\uFEFF" + doc,
		"encoded twice":       `"{\"current\":\"` + s2 + `\",\"previous\":[\"` + s1 + `\"],\"ids\":\"` + s1 + `\"}"`,
		"encoded twice, mark": "\uFEFF" + `"{\"current\":\"` + s2 + `\"}"`,
		"encoded three times": `"\"{\\\"current\\\":\\\"` + s2 + `\\\"}\""`,
		"two marks":           "\uFEFF\uFEFF" + doc,
		"zero-width space":    "\u200B" + doc,
		"single-quoted":       "'" + doc + "'",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseSecret(mangled); err == nil {
				t.Fatalf("ParseSecret(%q) accepted as a secret of its own", mangled)
			}
			if _, err := NewProvider(context.Background(), func(context.Context) (string, error) { return mangled, nil }); err == nil {
				t.Fatal("a cold start took the mangled document")
			}
			secret := s1
			p, err := NewProvider(context.Background(), func(context.Context) (string, error) { return secret, nil })
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			p.Now = func() time.Time { return now }
			var refused []error
			p.Refused = func(err error) { refused = append(refused, err) }
			before := p.Keys(context.Background())
			secret, now = mangled, now.Add(p.Refresh)
			if k := p.Keys(context.Background()); k.KeyDigest("key-1") != before.KeyDigest("key-1") {
				t.Fatal("a warm function took the mangled document as a new secret: key digests changed")
			}
			if len(refused) != 1 || strings.Contains(refused[0].Error(), s2) {
				t.Fatalf("the refused refresh was reported %d times (%v), want once, without the secret", len(refused), refused)
			}
		})
	}
	// A stack that ran on such a value as its single secret gets the same
	// keys from {"current": that value} (deploying.md's upgrade step): a
	// document naming only a current secret derives what that secret alone
	// does.
	if doc, single := mustKeys(t, `{"current":"`+s1+`"}`), mustKeys(t, s1); doc.KeyID() != single.KeyID() ||
		doc.KeyDigest("key-1") != single.KeyDigest("key-1") || !bytes.Equal(doc.IdentDigest("a"), single.IdentDigest("a")) {
		t.Error(`{"current": V} has other keys than V as the single secret`)
	}
	// Secrets that only look odd are single secrets, as before.
	for _, single := range []string{"'" + s1, `"` + s1 + `"`, s1 + "{}", "\uFEFF" + s1, `"\"` + s1 + `\""`} {
		if _, err := ParseSecret(single); err != nil {
			t.Errorf("ParseSecret(%q): %v", single, err)
		}
	}
}
