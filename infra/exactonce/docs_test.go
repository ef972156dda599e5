package exactonce

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
