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

// TestLibrariesStandAlone: client, idempotency and events are modules of
// their own whose packages and tests import nothing of the service, and a
// module of a team's that imports all of them (every package) and is tidied
// with `go mod tidy` has none of the heavy modules in its go.sum.
func TestLibrariesStandAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command on a new module")
	}
	module := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindStringSubmatch(readFile(t, "go.mod"))[1]
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	mainGo := "package main\n\nimport (\n"
	tidy := [][]string{{"mod", "init", "example.com/host"}}
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
		for _, pkg := range strings.Fields(goCmd(t, filepath.Join(abs, lib), "list", "./...")) {
			mainGo += "\t_ " + `"` + pkg + `"` + "\n"
		}
		tidy = append(tidy, []string{"mod", "edit", "-replace", path + "=" + filepath.Join(abs, lib)})
	}
	if err := os.WriteFile(filepath.Join(host, "main.go"), []byte(mainGo+")\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range append(tidy, []string{"mod", "tidy"}, []string{"build", "-o", os.DevNull, "."}) {
		goCmd(t, host, args...)
	}
	sum, err := os.ReadFile(filepath.Join(host, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range heavy {
		if bytes.Contains(sum, []byte(h)) {
			t.Errorf("the host's go.sum lists %s", strings.TrimSpace(h))
		}
	}
	modules := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(sum)), "\n") {
		modules[strings.Fields(l)[0]] = true
	}
	t.Logf("a module importing every package of %s, tidied: %d go.sum lines, %d modules, none of %q", libraries,
		strings.Count(string(sum), "\n"), len(modules), heavy)
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
