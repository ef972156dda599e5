package exactonce

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// fullProps turns every option on (but tracing, which TestTracing covers).
func fullProps() Props {
	return Props{
		Throwaway: true, Auth: AuthJWT, JwtIssuer: "https://i.example", JwtAudience: []string{"a", "b"},
		AlarmEmail: "ops@example.com", ExampleSubscriber: true, ExampleSubscriberTenant: "coupons", ExpiryShards: 32,
		Tenants: map[string][]string{"coupons": {"arn:aws:iam::111122223333:role/coupon-*"}}, TenantClaim: "client_id",
	}
}

// TestStackLogicalIds: with StackLogicalIds, every resource and output has
// the logical id (and type) it had in the stack "ExactOnce" before ExactOnce
// was a construct (testdata: `make synth` of that commit, default context
// and every option on), so deploying over such a stack replaces nothing.
func TestStackLogicalIds(t *testing.T) {
	for name, p := range map[string]Props{"default": {}, "full": fullProps()} {
		want, err := os.ReadFile(moduleRoot + "/infra/exactonce/testdata/stack-ids-" + name + ".txt")
		if err != nil {
			t.Fatal(err)
		}
		p.StackLogicalIds = true
		_, tmpl := synthStack(t, "ExactOnce", p)
		if got := idList(tmpl); got != string(want) {
			t.Errorf("%s: logical ids differ from testdata (-want +got):\n%s", name, lineDiff(string(want), got))
		}
	}
}

// TestNestedLayout: embedded (nested logical ids) ExactOnce defines the same
// resources with the same properties as the standalone stack; only the
// logical ids (and names made from paths: TestStackNames) differ.
func TestNestedLayout(t *testing.T) {
	p := fullProps()
	_, flat := synthStack(t, "Test", Props{StackLogicalIds: true, AlarmEmail: p.AlarmEmail, ExampleSubscriber: true})
	_, nested := synthStack(t, "Test", Props{AlarmEmail: p.AlarmEmail, ExampleSubscriber: true})
	f, n := withoutIds(flat), withoutIds(nested)
	if !slices.Equal(f, n) {
		t.Errorf("nested layout differs (-flat +nested):\n%s", lineDiff(strings.Join(f, "\n"), strings.Join(n, "\n")))
	}
	for id := range nested["Resources"].(map[string]any) {
		if id != "CDKMetadata" && !strings.HasPrefix(id, "ExactOnce") {
			t.Errorf("nested resource %s is not under the ExactOnce construct", id)
		}
	}
}

// TestMakeUniqueID: makeUniqueID is the CDK's algorithm.
func TestMakeUniqueID(t *testing.T) {
	must(t, func() {
		app := awscdk.NewApp(nil)
		stack := awscdk.NewStack(app, jsii.String("S"), nil)
		c := constructs.NewConstruct(stack, jsii.String("Ex-act"))
		for _, id := range []string{"Default", "Resource", "Ex", "A{b}/c", strings.Repeat("Long", 70)} {
			c = constructs.NewConstruct(c, jsii.String(id))
			if got, want := makeUniqueID(strings.Split(*c.Node().Path(), "/")), *awscdk.Names_NodeUniqueId(c.Node()); got != want {
				t.Errorf("%s: %s, CDK says %s", *c.Node().Path(), got, want)
			}
		}
	})
	if got := makeUniqueID([]string{"ExactOnce", "Actions"}); got != "ExactOnceActionsE6C30688" { // in the ESM's id in testdata
		t.Errorf("ExactOnce/Actions: %s", got)
	}
}

// idList is "logicalId Type" per resource (CDKMetadata aside) and
// "name Output" per output, sorted.
func idList(tmpl map[string]any) string {
	var out []string
	for id, r := range tmpl["Resources"].(map[string]any) {
		if typ := r.(map[string]any)["Type"]; typ != "AWS::CDK::Metadata" {
			out = append(out, fmt.Sprint(id, " ", typ))
		}
	}
	sort.Strings(out)
	var outs []string
	for id := range tmpl["Outputs"].(map[string]any) {
		if id != "BootstrapVersion" {
			outs = append(outs, id+" Output")
		}
	}
	sort.Strings(outs)
	return strings.Join(append(out, outs...), "\n") + "\n"
}

// withoutIds is every resource and output as JSON, each logical id in it
// replaced by "#", and the names made from paths (the bus's, a rule's
// statement id) too, sorted.
func withoutIds(tmpl map[string]any) []string {
	var ids []string
	for id := range tmpl["Resources"].(map[string]any) {
		ids = append(ids, id)
	}
	// longest first, so an id that prefixes another does not cut it
	sort.Slice(ids, func(i, j int) bool { return len(ids[i]) > len(ids[j]) })
	var out []string
	for _, section := range []string{"Resources", "Outputs"} {
		for _, r := range tmpl[section].(map[string]any) {
			if r.(map[string]any)["Type"] == "AWS::Events::EventBus" {
				props(r.(map[string]any))["Name"] = "#name"
			}
			s := ruleSid.ReplaceAllString(jsonOf(r), `"Sid":"AllowEventRule#"`)
			for _, id := range ids {
				s = strings.ReplaceAll(s, `"`+id+`"`, `"#"`)
				s = strings.ReplaceAll(s, `"`+id+`.`, `"#.`)
			}
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

var ruleSid = regexp.MustCompile(`"Sid":"AllowEventRule[A-Za-z0-9]*"`)

// lineDiff lists the lines only in a (-) or only in b (+).
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var d []string
	for l := range ma {
		if !mb[l] {
			d = append(d, "- "+l)
		}
	}
	for l := range mb {
		if !ma[l] {
			d = append(d, "+ "+l)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}

// TestStackNames: names the CDK makes from a construct's path are the
// standalone stack's too (in its template at 168b8a7): the bus's, and the
// statement of the audit rule in its dead-letter queue's policy.
func TestStackNames(t *testing.T) {
	p := fullProps()
	p.StackLogicalIds = true
	_, tmpl := synthStack(t, "ExactOnce", p)
	for _, bus := range resources(tmpl, "AWS::Events::EventBus") {
		if name := props(bus)["Name"]; name != "ExactOnceBusD452C403" {
			t.Errorf("bus name %v, want ExactOnceBusD452C403", name)
		}
	}
	pol := jsonOf(resources(tmpl, "AWS::SQS::QueuePolicy")["AuditDeadLettersPolicy64D30898"])
	if !strings.Contains(pol, `"Sid":"AllowEventRuleExactOnceAuditRule44CCC280"`) || strings.Count(pol, `"Sid"`) != 1 {
		t.Errorf("dead letters' policy: %s", pol)
	}
}
