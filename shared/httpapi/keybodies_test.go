package httpapi

import (
	"errors"
	"strings"
	"testing"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/shared/action"
)

func TestKeyBodiesAreValidated(t *testing.T) {
	five, zero := 5, 0
	for _, c := range []struct {
		name  string
		err   error
		field string
	}{
		{"key ok", validateKeyName("order-1:pay~2"), ""},
		{"key slash", validateKeyName("a/b"), "key"},
		{"key empty", validateKeyName(""), "key"},
		{"claim ok", second(validateKeyClaim(&keyClaimRequest{Fingerprint: "f", LeaseSeconds: &five})), ""},
		{"claim lease 0", second(validateKeyClaim(&keyClaimRequest{Fingerprint: "f", LeaseSeconds: &zero})), "leaseSeconds"},
		{"claim no fingerprint", second(validateKeyClaim(&keyClaimRequest{})), "fingerprint"},
		{"complete no token", validateKeyComplete(&keyCompleteRequest{Response: []byte("1")}), "token"},
		{"complete no response", validateKeyComplete(&keyCompleteRequest{Token: idempotency.NewToken()}), "response"},
		{"release ok", validateKeyRelease(&keyReleaseRequest{Token: idempotency.NewToken(), Error: "declined"}), ""},
		{"release bad token", validateKeyRelease(&keyReleaseRequest{Token: "zz"}), "token"},
		// The Token schema is lower-case hex: the token upper-cased (as some
		// hex encoders write it) reached DynamoDB and was told lease_lost
		// while its lease ran.
		{"complete upper-case token", validateKeyComplete(&keyCompleteRequest{Token: strings.ToUpper(idempotency.NewToken()), Response: []byte("1")}), "token"},
		{"release upper-case token", validateKeyRelease(&keyReleaseRequest{Token: strings.ToUpper(idempotency.NewToken())}), "token"},
	} {
		var inv *action.InvalidError
		switch {
		case c.field == "" && c.err != nil:
			t.Errorf("%s: %v", c.name, c.err)
		case c.field != "" && (!errors.As(c.err, &inv) || inv.Field != c.field):
			t.Errorf("%s: %v, want an error on %s", c.name, c.err, c.field)
		}
	}
	if d, _ := validateKeyClaim(&keyClaimRequest{Fingerprint: "f"}); d != idempotency.DefaultLease {
		t.Errorf("default lease %v", d)
	}
}

func second[T any](_ T, err error) error { return err }

// TestFitErrorIsAValidReleaseError: every text the library fits as a key's
// last error (idempotency.FitError), so every reason client.KeyStore sends,
// is one the release route takes.
func TestFitErrorIsAValidReleaseError(t *testing.T) {
	wide := strings.Repeat("𝄞", idempotency.MaxErrorLen)
	for _, in := range []string{"card declined", "a\nb\tc\x00", "a\xff\xfeb", wide, wide + "x", strings.Repeat("e", 100<<10)} {
		if err := validateKeyRelease(&keyReleaseRequest{Token: idempotency.NewToken(), Error: idempotency.FitError(in)}); err != nil {
			t.Errorf("%.30q: the API refuses the fitted text: %v", in, err)
		}
	}
}

// TestKeyNamesAreValidNames: the library keeps a key as its name exactly
// when the /keys routes take that name, and hashes it otherwise, so every
// key works over the hosted keys.
func TestKeyNamesAreValidNames(t *testing.T) {
	for _, name := range []string{"order-1:pay~2", "a.b_c", strings.Repeat("k", 255), strings.Repeat("k", 256),
		"", ".", "..", "a/b", "a b", "ä", "a%2F", "x\n"} {
		kept := idempotency.KeyName("", name) == name
		if valid := validateKeyName(name) == nil; kept != valid {
			t.Errorf("%.20q: kept as its name %v, a valid /keys name %v", name, kept, valid)
		}
		if err := validateKeyName(idempotency.KeyName("", name)); err != nil {
			t.Errorf("%.20q: KeyName gives %q, which the /keys routes refuse: %v", name, idempotency.KeyName("", name), err)
		}
	}
}
