package exactonce

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHostModule does what a user does with docs/cdk-construct.md ("Embed in
// your CDK app"): a Go module of their own, outside this repository, that requires
// ExactOnce (here through a replace to this checkout, as the page's
// install line from a checkout does), tidied with `go mod tidy`, whose
// main.go builds the functions with BuildFunctions and runs the page's
// code. It synthesizes, and the functions' binaries come out for Lambda,
// although the host's go.sum has no entry for what only the functions
// import (the SQS client of the publisher).
func TestHostModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a CDK app in a new module")
	}
	page, err := os.ReadFile(filepath.Join(moduleRoot, "docs", "cdk-construct.md"))
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile("(?s)```go\nfunc Example\\(\\) \\{\n(.*?)\n\\}\n```").FindSubmatch(page)
	if body == nil {
		t.Fatal(`docs/cdk-construct.md: no "func Example() {" block`)
	}
	example, err := os.ReadFile(filepath.Join(moduleRoot, "infra", "exactonce", "example_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	imports := regexp.MustCompile(`(?s)\nimport \((.*?)\n\)`).FindSubmatch(example)
	if imports == nil {
		t.Fatal("example_test.go: no import block")
	}

	host := t.TempDir()
	mainGo := "package main\n\nimport (\n\t\"log\"\n" + string(imports[1]) + "\n)\n\n" +
		"func main() {\n\tdefer jsii.Close()\n" +
		"\tif err := exactonce.BuildFunctions(\".\", \"dist/lambda\"); err != nil {\n\t\tlog.Fatal(err)\n\t}\n" +
		string(body[1]) + "\n}\n"
	// The page's Example ends with its expected output as a comment.
	want := regexp.MustCompile(`// Output: (.*)`).FindStringSubmatch(mainGo)
	if want == nil {
		t.Fatal("docs/cdk-construct.md example: no // Output: line")
	}
	if err := os.WriteFile(filepath.Join(host, "main.go"), []byte(mainGo), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = host
		// The user's shell: no workspace, no flags of this repository's
		// test run; module downloads from the shared cache.
		cmd.Env = append(goEnv(), "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	run("go", "mod", "init", "example.com/shop")
	run("go", "mod", "edit", "-replace", Module+"="+moduleRoot)
	run("go", "mod", "tidy")
	sum, err := os.ReadFile(filepath.Join(host, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sum, []byte("aws-sdk-go-v2/service/sqs ")) {
		t.Fatal("the host's go.sum lists the SQS client: this test no longer shows that the functions build without it")
	}

	out := run("go", "run", ".")
	if strings.TrimSpace(out) != want[1] {
		t.Errorf("the host app printed %q, want %q", out, want[1])
	}
	for _, f := range Functions {
		bin, err := elf.Open(filepath.Join(host, "dist", "lambda", f, "bootstrap"))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if bin.Machine != elf.EM_AARCH64 {
			t.Errorf("%s: built for %v, want arm64", f, bin.Machine)
		}
		_ = bin.Close()
	}
}
