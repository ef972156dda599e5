package store

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// update accumulates one UpdateItem's expressions. Attribute names always go
// through #name placeholders and values through :name placeholders.
type update struct {
	sets   []string
	adds   []string
	names  map[string]string
	values map[string]types.AttributeValue
}

func newUpdate() *update {
	return &update{names: map[string]string{}, values: map[string]types.AttributeValue{}}
}

// name registers an attribute and returns its placeholder: #attr, or #aN
// for a name that is not alphanumeric (placeholders must be) or whose #attr
// is taken by another name (a caller's useId may read "a1").
func (u *update) name(attr string) string {
	for p, a := range u.names {
		if a == attr {
			return p
		}
	}
	ph := "#" + attr
	if _, taken := u.names[ph]; taken || !alnum(attr) {
		for i := len(u.names); ; i++ {
			if ph = fmt.Sprintf("#a%d", i); u.names[ph] == "" {
				break
			}
		}
	}
	u.names[ph] = attr
	return ph
}

// value registers a value under :key (:vN when key is not alphanumeric)
// and returns its placeholder.
func (u *update) value(key string, v types.AttributeValue) string {
	ph := ":" + key
	if !alnum(key) {
		ph = fmt.Sprintf(":v%d", len(u.values))
	}
	u.values[ph] = v
	return ph
}

func alnum(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') }) < 0
}

// set adds "SET #attr = :attr".
func (u *update) set(attr string, v types.AttributeValue) {
	u.sets = append(u.sets, u.name(attr)+" = "+u.value(attr, v))
}

// setIf adds the SET only when the string is not empty (an absent field is
// not stored, so attribute_exists means "was given").
func (u *update) setIf(attr, v string) {
	if v != "" {
		u.set(attr, s(v))
	}
}

// expression renders the UpdateExpression.
func (u *update) expression() string {
	var parts []string
	if len(u.sets) > 0 {
		parts = append(parts, "SET "+strings.Join(u.sets, ", "))
	}
	if len(u.adds) > 0 {
		parts = append(parts, "ADD "+strings.Join(u.adds, ", "))
	}
	return strings.Join(parts, " ")
}

// cond renders a condition template in which {attr} stands for the
// placeholder of attribute attr, registering every name it uses.
func (u *update) cond(tmpl string) string {
	var out strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			out.WriteString(tmpl)
			return out.String()
		}
		j := strings.IndexByte(tmpl[i:], '}') + i
		out.WriteString(tmpl[:i])
		out.WriteString(u.name(tmpl[i+1 : j]))
		tmpl = tmpl[j+1:]
	}
}
