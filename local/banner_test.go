package main

import (
	"testing"

	"github.com/exactonce/exactonce/shared/tenant"
)

// TestExampleCaller: the banner's caller is one the map places in the
// tenant it names, for name patterns, role ARN patterns and wildcards.
func TestExampleCaller(t *testing.T) {
	for _, c := range []struct{ tenants, wantTenant string }{
		{`{"coupons":["coupon-svc"],"login":["login-svc"]}`, "coupons"},
		{`{"coupons":["arn:aws:iam::111122223333:role/coupon-*"]}`, "coupons"},
		{`{"x":["same"],"y":["same"],"z":["z-svc"]}`, "z"}, // x and y tie: no caller places either
	} {
		m, err := tenant.Parse(c.tenants)
		if err != nil {
			t.Fatal(err)
		}
		tn, caller, ok := exampleCaller(m)
		if !ok || tn != c.wantTenant {
			t.Errorf("%s: %q %q %v, want tenant %s", c.tenants, tn, caller, ok, c.wantTenant)
			continue
		}
		if got, ok := m.Resolve(tenant.IAMPrincipals(caller)...); !ok || got != tn {
			t.Errorf("%s: caller %s resolves to %q %v", c.tenants, caller, got, ok)
		}
	}
	if _, _, ok := exampleCaller(nil); ok {
		t.Error("no map: no example caller")
	}
}
