package tenant

import "strings"

// Names are the map's tenants, sorted (none for a nil Map).
func (m *Map) Names() []string {
	if m == nil {
		return nil
	}
	return append([]string(nil), m.tenants...)
}

// ExampleCaller is an IAM principal ARN the map places in its first tenant
// (in name order), for the local server's banner: an assumed role made from
// the first of the tenant's patterns that gives one (a role name, or a role
// ARN, with each `*` read as "x"). ok is false when no pattern gives a
// caller that Resolve places in that tenant.
func (m *Map) ExampleCaller() (tenant, caller string, ok bool) {
	if m == nil {
		return "", "", false
	}
	for _, t := range m.tenants {
		for _, p := range m.rules[t] {
			name := strings.ReplaceAll(p, "*", "x")
			candidates := []string{name}
			if !strings.HasPrefix(name, "arn:") {
				candidates = []string{"arn:aws:sts::111122223333:assumed-role/" + name + "/local", name}
			} else if acct, role, found := strings.Cut(name, ":role/"); found && strings.HasPrefix(acct, "arn:aws:iam::") {
				candidates = append([]string{"arn:aws:sts::" + strings.TrimPrefix(acct, "arn:aws:iam::") + ":assumed-role/" + role + "/local"}, name)
			}
			for _, c := range candidates {
				if got, ok := m.Resolve(IAMPrincipals(c)...); ok && got == t {
					return t, c, true
				}
			}
		}
	}
	return "", "", false
}
