package docs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// libraries are the modules a team imports on their own, each in its folder.
var libraries = []string{"client", "idempotency", "events"}

// heavy are what a library must never bring into a module that imports it:
// the service's CDK app (the CDK, jsii, cdk-nag), its OpenAPI tests
// (libopenapi) and its X-Ray build, and the service's module itself.
var heavy = []string{
	"github.com/aws/aws-cdk-go/", "github.com/aws/jsii-runtime-go ", "github.com/aws/constructs-go/",
	"github.com/cdklabs/", "github.com/pb33f/libopenapi", "github.com/aws/aws-xray-sdk-go ",
	"github.com/exactonce/exactonce ",
}

// pagesOf are the pages that tell a user how to add each library to a
// module of theirs.
var pagesOf = map[string]string{"client": "docs/go-client.md", "idempotency": "docs/idempotency.md", "events": "docs/events.md"}

// TestLibrariesStandAlone: client, idempotency and events are modules of
// their own whose packages and tests import nothing of the service; each,
// added alone to a new module of a team's as its page says (the page's
// `go mod edit -replace` line, then `go mod tidy`), builds with every one of
// its packages imported, and neither that module nor one importing all three
// has any of the heavy modules in its go.sum.
func TestLibrariesStandAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command on new modules")
	}
	module := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindStringSubmatch(readFile(t, "go.mod"))[1]
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	var all []string      // every package of the three
	var allEdits []string // a replace for each
	for _, lib := range libraries {
		path := module + "/" + lib
		if got := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindStringSubmatch(readFile(t, lib+"/go.mod")); got == nil || got[1] != path {
			t.Fatalf("%s/go.mod: module %v, want %s", lib, got, path)
		}
		for _, pkg := range strings.Fields(goCmd(t, filepath.Join(abs, lib), "list", "-deps", "-test", "-f", "{{.ImportPath}}", "./...")) {
			pkg = strings.TrimSuffix(strings.TrimSuffix(pkg, ".test"), "_test") // a test binary, an external test package
			if strings.HasPrefix(pkg, module+"/") && !isLibrary(module, pkg) || pkg == module {
				t.Errorf("%s imports %s, a package of the service", lib, pkg)
			}
		}
		pkgs := strings.Fields(goCmd(t, filepath.Join(abs, lib), "list", "./..."))
		all = append(all, pkgs...)
		allEdits = append(allEdits, "-replace", path+"="+filepath.Join(abs, lib))

		// The page's install line, with the checkout here.
		edits := installLine(t, pagesOf[lib], module, path, abs)
		sum := hostModule(t, pkgs, edits)
		t.Logf("%s alone (%s: go mod edit %s, go mod tidy): %d go.sum lines, %d modules", lib, pagesOf[lib],
			strings.Join(edits, " "), strings.Count(sum, "\n"), modules(sum))
	}
	sum := hostModule(t, all, allEdits)
	t.Logf("a module importing every package of %s, tidied: %d go.sum lines, %d modules, none of %q", libraries,
		strings.Count(sum, "\n"), modules(sum), heavy)
}

// installLine reads the `go mod edit -replace module/x=../exactonce/x`
// block of a library's page and returns its arguments with the checkout at
// abs in place of ../exactonce; its "once tagged" line must name the
// library at the version the service's go.mod requires.
func installLine(t *testing.T, page, module, lib, abs string) []string {
	t.Helper()
	text := readFile(t, page)
	block := regexp.MustCompile("(?s)```sh\n(go mod edit [^`]*?)```").FindStringSubmatch(text)
	if block == nil {
		t.Fatalf("%s: no sh block with the go mod edit line that adds %s", page, lib)
	}
	var edits []string
	for _, m := range regexp.MustCompile(`-replace (\S+)=\.\./exactonce(/\S*)?`).FindAllStringSubmatch(block[1], -1) {
		if m[1] != module+m[2] {
			t.Errorf("%s: -replace %s points at ../exactonce%s", page, m[1], m[2])
		}
		edits = append(edits, "-replace", m[1]+"="+abs+m[2])
	}
	version := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(lib) + `\s+(v\S+)`).FindStringSubmatch(readFile(t, "go.mod"))
	if version == nil {
		t.Fatalf("go.mod does not require %s", lib)
	}
	if want := "go get " + lib + "@" + version[1]; !strings.Contains(block[1], want) {
		t.Errorf("%s: the install block does not say %q (the version go.mod requires):\n%s", page, want, block[1])
	}
	return edits
}

// hostModule makes a new module whose main.go imports pkgs, applies the
// go mod edit arguments, tidies and builds it, checks its go.sum holds none
// of the heavy modules, and returns the go.sum.
func hostModule(t *testing.T, pkgs, edits []string) string {
	t.Helper()
	host := t.TempDir()
	mainGo := "package main\n\nimport (\n"
	for _, pkg := range pkgs {
		mainGo += "\t_ " + `"` + pkg + `"` + "\n"
	}
	if err := os.WriteFile(filepath.Join(host, "main.go"), []byte(mainGo+")\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd(t, host, "mod", "init", "example.com/host")
	goCmd(t, host, append([]string{"mod", "edit"}, edits...)...)
	goCmd(t, host, "mod", "tidy")
	goCmd(t, host, "build", "-o", os.DevNull, ".")
	sum, err := os.ReadFile(filepath.Join(host, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range heavy {
		if bytes.Contains(sum, []byte(h)) {
			t.Errorf("importing %v: the host's go.sum lists %s", pkgs, strings.TrimSpace(h))
		}
	}
	return string(sum)
}

// modules counts the modules a go.sum names.
func modules(sum string) int {
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(sum), "\n") {
		seen[strings.Fields(l)[0]] = true
	}
	return len(seen)
}

func isLibrary(module, pkg string) bool {
	for _, lib := range libraries {
		if pkg == module+"/"+lib || strings.HasPrefix(pkg, module+"/"+lib+"/") {
			return true
		}
	}
	return false
}

// goCmd runs the go command in dir as a user's shell would: no workspace,
// none of this test run's flags.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOWORK=") && !strings.HasPrefix(kv, "GOFLAGS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return string(out)
}
