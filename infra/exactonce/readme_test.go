package exactonce

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeExample: the README's "Embed in your CDK app" code is Example,
// word for word, so what readers copy compiles and runs.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(moduleRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(moduleRoot, "infra", "exactonce", "example_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	block := func(s, start, end string) string {
		i := strings.Index(s, start)
		if i < 0 {
			return ""
		}
		j := strings.Index(s[i:], end)
		if j < 0 {
			return ""
		}
		return s[i : i+j]
	}
	want := block(string(example), "func Example() {", "\n}\n")
	if got := block(string(readme), "func Example() {", "\n}\n```"); want == "" || got != want {
		t.Errorf("README's example differs from example_test.go's Example:\nREADME:\n%s\nexample_test.go:\n%s", got, want)
	}
}

// docsText is the README and the pages under docs/, where its sections may
// move: a list checked below is found wherever it is.
func docsText(t *testing.T) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(moduleRoot, "docs", "*.md"))
	var b strings.Builder
	for _, f := range append([]string{filepath.Join(moduleRoot, "README.md")}, files...) {
		text, err := os.ReadFile(f)
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
