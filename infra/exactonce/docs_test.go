package exactonce

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/exactonce/exactonce/shared/httpapi"
)

// docsText is the pages of docs/ that give the lists checked below: the
// construct's page (GrantInvoke's route names) and the contributing page
// (the Folders table).
func docsText(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, page := range []string{"cdk-construct.md", "contributing.md"} {
		text, err := os.ReadFile(filepath.Join(moduleRoot, "docs", page))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(text)
	}
	return b.String()
}

// lineWith is the first line of text containing marker.
func lineWith(t *testing.T, text, marker string) string {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, marker) {
			return l
		}
	}
	t.Fatalf("the docs have no line with %q", marker)
	return ""
}

// TestDocsListEveryRoute: the lists of routes and functions the docs give
// (GrantInvoke's route names, the functions/ folder row) and RouteArn's
// message name every route and function there is.
func TestDocsListEveryRoute(t *testing.T) {
	text := docsText(t)
	i := strings.Index(text, "routes are named by their function:")
	if i < 0 {
		t.Fatal(`the docs lost "routes are named by their function:"`)
	}
	named, _, _ := strings.Cut(text[i:], ")")
	var msg any
	func() {
		defer func() { msg = recover() }()
		(&ExactOnce{}).RouteArn("nope")
	}()
	for _, r := range Routes {
		if !strings.Contains(named, "`"+r.Function+"`") {
			t.Errorf("GrantInvoke's route names in the docs miss %s", r.Function)
		}
		if !strings.Contains(fmt.Sprint(msg), " "+r.Function) {
			t.Errorf("RouteArn's message misses %s: %v", r.Function, msg)
		}
	}
	folders := lineWith(t, text, "| `functions/` |")
	dirs, err := os.ReadDir(filepath.Join(moduleRoot, "functions"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && !strings.Contains(folders, "`"+d.Name()+"`") {
			t.Errorf("the Folders table's functions/ row misses %s", d.Name())
		}
	}
}

// TestDeployingPageHasWhatADeployerNeeds: docs/deploying.md gives, from
// what the stack really has: every output (AddOutputs), the reserved
// concurrency and the account quota it needs, the scope of every route for a
// JWT caller and the claim that names the tenant, a caller's IAM policy on
// the API's ARN, the flag a CI deploy needs to approve IAM changes, that
// jwtAudience is a comma-separated list, and what make synth prints.
func TestDeployingPageHasWhatADeployerNeeds(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot, "docs", "deploying.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	src, err := os.ReadFile(filepath.Join(moduleRoot, "infra", "exactonce", "exactonce.go"))
	if err != nil {
		t.Fatal(err)
	}
	outputs := regexp.MustCompile(`\bout\("(\w+)"`).FindAllStringSubmatch(string(src), -1)
	if len(outputs) < 6 {
		t.Fatalf("exactonce.go: found %d outputs", len(outputs))
	}
	for _, o := range outputs {
		if !strings.Contains(page, "`"+o[1]+"`") {
			t.Errorf("deploying.md does not name the output %s", o[1])
		}
	}
	reserved := RecommendedReservedConcurrency + SweeperReservedConcurrency
	for _, n := range []int{reserved, reserved + UnreservedMinimum} {
		if !strings.Contains(page, "**"+strconv.Itoa(n)+"**") {
			t.Errorf("deploying.md does not state (in bold) %d: with the recommended exactonce:reservedConcurrency=%d the stack reserves %d concurrent executions, so the account's quota must be at least %d",
				n, RecommendedReservedConcurrency, reserved, reserved+UnreservedMinimum)
		}
	}
	for _, s := range []string{"exactonce:reservedConcurrency", "off"} {
		if !strings.Contains(page, s) {
			t.Errorf("deploying.md does not say how reserved concurrency is chosen (%s)", s)
		}
	}
	for _, r := range Routes {
		route := string(r.Method) + " " + r.Path
		row := ""
		for _, l := range strings.Split(page, "\n") {
			if strings.HasPrefix(l, "|") && strings.Contains(l, "`"+route+"`") {
				row = l
			}
		}
		if scope := httpapi.RouteScope(route); row == "" || !strings.Contains(row, "`"+scope+"`") {
			t.Errorf("deploying.md has no table row giving %s its JWT scope %s", route, scope)
		}
	}
	for _, want := range []string{
		"exactonce:tenantClaim", "`" + httpapi.DefaultTenantClaim + "`", "Authorization: Bearer",
		`"Action": "execute-api:Invoke"`, "arn:aws:execute-api:", "--require-approval never",
		"comma-separated", "cdk.out/ExactOnce.template.json",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("deploying.md does not say %q", want)
		}
	}
}
