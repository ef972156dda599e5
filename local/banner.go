package main

import (
	"strings"

	"github.com/exactonce/exactonce/shared/tenant"
)

// exampleCaller is an IAM principal ARN the map places in its first tenant
// (in name order), for the banner: an assumed role made from the first of
// the tenant's patterns that gives one (a role name, or a role ARN, with
// each `*` read as "x"). ok is false when no pattern gives a caller that
// the map places in that tenant.
func exampleCaller(m *tenant.Map) (name, caller string, ok bool) {
	for _, t := range m.Names() {
		for _, p := range m.Patterns(t) {
			arn := strings.ReplaceAll(p, "*", "x")
			candidates := []string{arn}
			if !strings.HasPrefix(arn, "arn:") {
				candidates = []string{"arn:aws:sts::111122223333:assumed-role/" + arn + "/local", arn}
			} else if acct, role, found := strings.Cut(arn, ":role/"); found && strings.HasPrefix(acct, "arn:aws:iam::") {
				candidates = append([]string{"arn:aws:sts::" + strings.TrimPrefix(acct, "arn:aws:iam::") + ":assumed-role/" + role + "/local"}, arn)
			}
			for _, c := range candidates {
				if got, ok := m.Resolve(tenant.IAMPrincipals(c)...); ok && got == t {
					return t, c, true
				}
			}
		}
	}
	return "", "", false
}
