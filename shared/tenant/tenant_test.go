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
	want := []string{"arn:aws:sts::111122223333:assumed-role/coupon-writer/session-1", "arn:aws:iam::111122223333:role/coupon-writer", "coupon-writer"}
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
