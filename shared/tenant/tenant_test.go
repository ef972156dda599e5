package tenant

import (
	"slices"
	"testing"
)

func TestResolve(t *testing.T) {
	m, err := Parse(`{"coupons":["arn:aws:iam::111122223333:role/coupon-*"],"login":["login-svc","arn:aws:iam::111122223333:user/alice"],"ops":["arn:aws:iam::111122223333:role/*"]}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		arn, want string
		ok        bool
	}{
		{"arn:aws:sts::111122223333:assumed-role/coupon-writer/s1", "", false},       // coupons and ops both match by a glob: refused
		{"arn:aws:sts::111122223333:assumed-role/login-svc/lambda-x", "login", true}, // role name, exact: beats ops's glob
		{"arn:aws:iam::111122223333:user/alice", "login", true},                      // exact ARN
		{"arn:aws:sts::111122223333:assumed-role/other-role/s", "ops", true},         // only ops's glob
		{"arn:aws:iam::999999999999:user/mallory", "", false},                        // unmapped
		{"", "", false},
	} {
		got, ok := m.Resolve(IAMPrincipals(tc.arn)...)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %q %v, want %q %v", tc.arn, got, ok, tc.want, tc.ok)
		}
	}
	var none *Map
	if got, ok := none.Resolve("anyone"); got != Default || !ok {
		t.Fatal("no map: everyone is the default tenant")
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{`[]`, `{"a b":["x"]}`, `{"a":[]}`, `{"a":[""]}`, `{"":["x"]}`, `{"a#b":["x"]}`} {
		if _, err := Parse(s); err == nil {
			t.Errorf("accepted %s", s)
		}
	}
	if m, err := Parse(" "); m != nil || err != nil {
		t.Fatal("blank map must mean no map")
	}
}

func TestIAMPrincipals(t *testing.T) {
	got := IAMPrincipals("arn:aws:sts::111122223333:assumed-role/coupon-writer/session-1")
	want := []string{"arn:aws:iam::111122223333:role/coupon-writer", "coupon-writer"} // never the session
	if !slices.Equal(got, want) {
		t.Fatalf("%q", got)
	}
	if got := IAMPrincipals("arn:aws:iam::111122223333:user/alice"); len(got) != 1 {
		t.Fatalf("%q", got)
	}
}

func TestItemKeys(t *testing.T) {
	for _, tc := range []struct{ tenant, id, pk string }{{Default, "coupon-42", "coupon-42"}, {"a", "coupon-42", "t#a#coupon-42"}} {
		pk := ItemKey(tc.tenant, tc.id)
		tn, id := SplitItemKey(pk)
		if pk != tc.pk || tn != tc.tenant || id != tc.id {
			t.Errorf("%+v: %s %s %s", tc, pk, tn, id)
		}
	}
}

// TestSessionNameChoosesNoTenant (issue 21, item 17): the session name of
// an assumed role is the caller's choice, so no pattern is matched against
// it: "*-star" names roles ending in -star, not sessions; a pattern naming
// an assumed-role session is refused. So is the name of a federated user
// (sts:GetFederationToken names it): such a caller is in no tenant, and a
// pattern naming one is refused. A role pattern with an IAM path
// matches that role (the assumed-role ARN carries no path; role names are
// unique in an account), and a glob under a path, which cannot be checked,
// is refused.
func TestSessionNameChoosesNoTenant(t *testing.T) {
	m, err := Parse(`{"star":["*-star"],"coupons":["arn:aws:iam::111122223333:role/team/payments/coupon-svc"]}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		arn, want string
		ok        bool
	}{
		{"arn:aws:sts::111122223333:assumed-role/nobody/pick-star", "", false},        // session chosen to match
		{"arn:aws:sts::111122223333:assumed-role/build-star/s1", "star", true},        // the role's name matches
		{"arn:aws:sts::111122223333:assumed-role/coupon-svc/s1", "coupons", true},     // the role under its path
		{"arn:aws:sts::999999999999:assumed-role/coupon-svc/s1", "", false},           // another account's role
		{"arn:aws:iam::111122223333:user/team/payments/coupon-svc", "", false},        // a user is not the role
		{"arn:aws:sts::111122223333:assumed-role/coupon-svc-x/coupon-svc", "", false}, // nor a session named like it
		{"arn:aws:sts::111122223333:federated-user/alice-star", "", false},            // a federated user's name is chosen too
		{"arn:aws:sts::111122223333:federated-user/coupon-svc", "", false},
	} {
		got, ok := m.Resolve(IAMPrincipals(tc.arn)...)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %q %v, want %q %v", tc.arn, got, ok, tc.want, tc.ok)
		}
	}
	for _, bad := range []string{
		`{"a":["arn:aws:sts::111122223333:assumed-role/r/s"]}`,
		`{"a":["arn:aws:sts::111122223333:assumed-role/r/*"]}`,
		`{"a":["arn:aws:iam::111122223333:role/team/*"]}`,
		`{"a":["arn:aws:iam::111122223333:role/te*/svc"]}`,
		`{"a":["arn:aws:sts::111122223333:federated-user/alice"]}`,
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}
