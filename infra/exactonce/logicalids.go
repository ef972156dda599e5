package exactonce

import (
	"crypto/md5"
	"encoding/hex"
	"regexp"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// logicalIds keeps the standalone stack's logical ids (Props.StackLogicalIds).
//
// CloudFormation knows a resource by its logical id, which the CDK derives
// from the construct path below the stack (human part + hash of the path).
// The parts (Table, Api, Events, …, each Function) add path components, so
// their resources would get new ids, and a new id replaces a resource. In
// this mode each part is transparent: its id is dropped from its
// descendants' paths (or, for a Function, put in front of its child's id:
// Create/Logs is CreateLogs), and every resource gets the id the flat path
// gives, as the stack had them before ExactOnce was a construct (and the
// event bus the name it had: see uniqueID). Construct
// ids the CDK makes from another construct's unique id (an event source
// mapping's "DynamoDBEventSource:<table>", a rule target's
// "AllowEventRule<rule>") are translated the same way.
type logicalIds struct {
	parts map[string]bool // construct path → merge its id into the child's
}

func (l *logicalIds) transparent(c constructs.IConstruct, merge bool) {
	if l.parts == nil {
		l.parts = map[string]bool{}
	}
	l.parts[*c.Node().Path()] = merge
}

// flat is a path's components without the transparent parts.
func (l *logicalIds) flat(path string) []string {
	comps := strings.Split(path, "/")
	var out []string
	carry := ""
	for i, c := range comps {
		if merge, ok := l.parts[strings.Join(comps[:i+1], "/")]; ok {
			if merge {
				carry += c
			}
			continue
		}
		out = append(out, carry+c)
		carry = ""
	}
	return out
}

// uniqueID is Names.uniqueId of the construct at path as it is without the
// parts, for a physical name the CDK derives from it (the event bus's).
func (l *logicalIds) uniqueID(path string) string { return makeUniqueID(l.flat(path)) }

// flatten overrides the logical id of every CloudFormation element under
// root. Call it once every resource under root exists.
func (l *logicalIds) flatten(root constructs.IConstruct) {
	stackPath := *awscdk.Stack_Of(root).Node().Path()
	all := *root.Node().FindAll(constructs.ConstructOrder_PREORDER)
	paths := make([]string, len(all))
	rename := map[string]string{} // unique id under the parts → without them
	for i, c := range all {
		paths[i] = *c.Node().Path()
		if nested, flat := makeUniqueID(strings.Split(paths[i], "/")), makeUniqueID(l.flat(paths[i])); nested != flat {
			rename[nested] = flat
		}
	}
	for i, c := range all {
		if !*awscdk.CfnElement_IsCfnElement(c) {
			continue
		}
		el, ok := c.(awscdk.CfnElement)
		if !ok {
			panic("exactonce: " + paths[i] + " is a CfnElement the Go bindings do not see as one")
		}
		var comps []string // below the stack
		if stackPath == "" {
			comps = l.flat(paths[i])
		} else {
			comps = l.flat(paths[i])[strings.Count(stackPath, "/")+1:]
		}
		for j, comp := range comps {
			for nested, flat := range rename {
				if strings.Contains(comp, nested) {
					comps[j] = strings.ReplaceAll(comps[j], nested, flat)
				}
			}
		}
		el.OverrideLogicalId(jsii.String(makeUniqueID(comps)))
	}
}

var nonAlphanumeric = regexp.MustCompile(`[^A-Za-z0-9]`)

// makeUniqueID is the CDK's makeUniqueId (core/lib/private/uniqueid.ts):
// how Stack.allocateLogicalId and Names.nodeUniqueId turn path components
// into an id. TestMakeUniqueID checks it against the CDK's.
func makeUniqueID(components []string) string {
	var comps []string
	for _, c := range components {
		if c != "Default" {
			comps = append(comps, c)
		}
	}
	if len(comps) == 0 {
		return ""
	}
	if len(comps) == 1 {
		if c := nonAlphanumeric.ReplaceAllString(comps[0], ""); len(c) <= 255 {
			return c
		}
	}
	sum := md5.Sum([]byte(strings.Join(comps, "/")))
	hash := strings.ToUpper(hex.EncodeToString(sum[:])[:8])
	var human []string
	for _, c := range comps { // removeDupes, then "Resource" hidden
		if len(human) == 0 || !strings.HasSuffix(human[len(human)-1], c) {
			human = append(human, c)
		}
	}
	var b strings.Builder
	for _, c := range human {
		if c != "Resource" {
			b.WriteString(nonAlphanumeric.ReplaceAllString(c, ""))
		}
	}
	h := b.String()
	if len(h) > 240 {
		h = h[:240]
	}
	return h + hash
}
