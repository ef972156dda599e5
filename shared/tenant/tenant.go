// Package tenant maps an authenticated caller to the tenant whose actions
// and keys it may reach, and gives each tenant its own key space in the
// table. Like the action rules it imports no AWS package.
//
// The map is JSON: tenant → list of principal patterns, where `*` matches
// any run of characters: {"coupons": ["arn:aws:iam::123456789012:role/coupon-*"],
// "login": ["login-service"]}. An IAM caller is matched by its ARN and, for
// an assumed role, by the role's ARN and the role's name; a JWT caller by
// the value of the configured claim. A caller that no pattern matches, or
// that patterns of two tenants match equally well, has no tenant.
package tenant

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Default is the tenant of every caller when no map is configured. Its
// items keep the keys they had before tenants existed (no migration).
const Default = ""

// MaxNameLen bounds a tenant name.
const MaxNameLen = 64

// Map is a parsed tenant map; nil means "no map: everyone is Default".
type Map struct {
	tenants []string // sorted
	rules   map[string][]string
}

// Parse reads the JSON map; "" gives a nil Map.
func Parse(text string) (*Map, error) {
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	var raw map[string][]string
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return nil, fmt.Errorf(`tenant: the map must be JSON {"tenant": ["principal pattern", ...]}: %w`, err)
	}
	m := &Map{rules: raw}
	for name, patterns := range raw {
		if err := ValidateName(name); err != nil {
			return nil, err
		}
		if len(patterns) == 0 {
			return nil, fmt.Errorf("tenant: %q has no principal patterns", name)
		}
		for i, p := range patterns {
			if p == "" {
				return nil, fmt.Errorf("tenant: %q has an empty principal pattern", name)
			}
			norm, err := rolePattern(p)
			if err != nil {
				return nil, fmt.Errorf("tenant: %q: %w", name, err)
			}
			patterns[i] = norm
		}
		m.tenants = append(m.tenants, name)
	}
	sort.Strings(m.tenants)
	return m, nil
}

// rolePattern checks a principal pattern against what a caller's identity
// can prove. An assumed-role ARN ends in a session name the caller chooses,
// so a pattern naming one is refused (name the role instead). An
// assumed-role ARN carries no IAM path, so a role pattern with a path is
// matched by the role's account and name (unique in an account): the path
// is dropped, and a pattern with `*` after "role/" and a path is refused,
// as the path could not be checked.
func rolePattern(p string) (string, error) {
	if strings.Contains(p, ":assumed-role/") {
		return "", fmt.Errorf("pattern %q names an assumed-role session, whose name the caller chooses: use the role's ARN (arn:aws:iam::ACCOUNT:role/NAME) or its name", p)
	}
	if strings.Contains(p, ":federated-user/") {
		return "", fmt.Errorf("pattern %q names a federated user, whose name the caller of sts:GetFederationToken chooses: give the service a role and name the role", p)
	}
	head, res, ok := strings.Cut(p, ":role/")
	if !ok || !strings.HasPrefix(p, "arn:") || !strings.Contains(res, "/") {
		return p, nil
	}
	if strings.Contains(res, "*") {
		return "", fmt.Errorf("pattern %q globs a role under an IAM path, which an assumed role's ARN does not carry: name the role exactly, or glob without the path", p)
	}
	return head + ":role/" + res[strings.LastIndexByte(res, '/')+1:], nil
}

// ValidateName checks a tenant name: 1 to 64 characters of [A-Za-z0-9._-].
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("tenant: name %q must be 1 to %d characters", name, MaxNameLen)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("tenant: name %q may hold only [A-Za-z0-9._-]", name)
		}
	}
	return nil
}

// Resolve returns the tenant of a caller known by the given names (see
// IAMPrincipals). With a nil Map every caller is Default. A pattern without
// `*` is a better match than one with; two tenants matching equally well is
// no match (a misconfiguration must not pick one by chance).
func (m *Map) Resolve(names ...string) (string, bool) {
	if m == nil {
		return Default, true
	}
	best, bestRank, tie := "", 0, false
	for _, t := range m.tenants {
		rank := 0
		for _, p := range m.rules[t] {
			for _, n := range names {
				if n != "" && match(p, n) {
					r := 1
					if !strings.Contains(p, "*") {
						r = 2
					}
					rank = max(rank, r)
				}
			}
		}
		switch {
		case rank > bestRank:
			best, bestRank, tie = t, rank, false
		case rank > 0 && rank == bestRank:
			tie = true
		}
	}
	if bestRank == 0 || tie {
		return "", false
	}
	return best, true
}

// match reports whether s matches the glob p, in which `*` matches any run
// of characters (slashes and colons included).
func match(p, s string) bool {
	parts := strings.Split(p, "*")
	if len(parts) == 1 {
		return p == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, part := range parts[1 : len(parts)-1] {
		i := strings.Index(s, part)
		if i < 0 {
			return false
		}
		s = s[i+len(part):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

// IAMPrincipals are the names an IAM caller is matched by: its ARN or, for
// an assumed role (arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION), the
// role's ARN (arn:aws:iam::ACCOUNT:role/NAME) and its name, never the
// assumed-role ARN: its session name is the caller's choice. Any other STS
// principal (a federated user, whose name the caller of
// sts:GetFederationToken chooses) has no name to match: it is in no tenant.
func IAMPrincipals(arn string) []string {
	rest, ok := strings.CutPrefix(arn, "arn:")
	if !ok {
		return []string{arn}
	}
	f := strings.SplitN(rest, ":", 5) // partition, service, region, account, resource
	if len(f) != 5 || f[1] != "sts" {
		return []string{arn}
	}
	role, ok := strings.CutPrefix(f[4], "assumed-role/")
	if !ok {
		return nil
	}
	name, _, _ := strings.Cut(role, "/")
	return []string{"arn:" + f[0] + ":iam::" + f[3] + ":role/" + name, name}
}

// ItemKey is the partition key of a tenant's action: the id itself for
// Default (as before tenants), else "t#TENANT#ID". Ids never hold '#', so
// key spaces cannot meet.
func ItemKey(tenant, id string) string {
	if tenant == Default {
		return id
	}
	return "t#" + tenant + "#" + id
}

// SplitItemKey undoes ItemKey.
func SplitItemKey(pk string) (tenant, id string) {
	if rest, ok := strings.CutPrefix(pk, "t#"); ok {
		if t, id, ok := strings.Cut(rest, "#"); ok {
			return t, id
		}
	}
	return Default, pk
}
