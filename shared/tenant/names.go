package tenant

// Names are the map's tenants, sorted (none for a nil Map).
func (m *Map) Names() []string {
	if m == nil {
		return nil
	}
	return append([]string(nil), m.tenants...)
}

// Patterns are the caller patterns the map gives tenant t, in the map's
// order (none for a nil Map or a tenant it does not have).
func (m *Map) Patterns(t string) []string {
	if m == nil {
		return nil
	}
	return append([]string(nil), m.rules[t]...)
}
