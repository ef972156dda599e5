package exactonce

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHostModule does what a user does with docs/cdk-construct.md ("Embed in
// your CDK app"): a Go module of their own, outside this repository, that
// requires ExactOnce (here through replaces to this checkout, as the page's
// install line from a checkout does: the service and each library module), tidied with `go mod tidy`, with the
// page's main.go and cdk.json, synthesized by the CDK CLI (`cdk synth`,
// which runs the app as cdk.json says: `go run .`). The template has the
// construct and the app's own resources, and the functions' binaries come
// out for Lambda, although the host's go.sum has no entry for what only the
// functions import (the SQS client of the publisher).
func TestHostModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a CDK app in a new module")
	}
	cdk := filepath.Join(moduleRoot, ".tools", "node_modules", ".bin", "cdk")
	if _, err := os.Stat(cdk); err != nil {
		t.Fatalf("the CDK CLI is not installed (run make tools): %v", err)
	}
	page, err := os.ReadFile(filepath.Join(moduleRoot, "docs", "cdk-construct.md"))
	if err != nil {
		t.Fatal(err)
	}
	mainGo := regexp.MustCompile("(?s)```go\n((?://[^\n]*\n)*package main\n.*?)```").FindSubmatch(page)
	if mainGo == nil {
		t.Fatal("docs/cdk-construct.md: no Go block with a whole main.go (package main)")
	}
	cdkJSON := regexp.MustCompile("(?s)```json\n(\\{[^`]*\"app\": \"go run \\.\"[^`]*)```").FindSubmatch(page)
	if cdkJSON == nil {
		t.Fatal(`docs/cdk-construct.md: no json block with the host's cdk.json ("app": "go run .")`)
	}

	goMod, err := os.ReadFile(filepath.Join(moduleRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	for name, b := range map[string][]byte{"main.go": mainGo[1], "cdk.json": cdkJSON[1]} {
		if err := os.WriteFile(filepath.Join(host, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = host
		// The user's shell: no workspace, no flags of this repository's
		// test run; module downloads from the shared cache.
		cmd.Env = append(goEnv(), "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20", "CDK_DISABLE_CLI_TELEMETRY=true")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String() + stderr.String()
	}
	run("go", "mod", "init", "example.com/shop")
	run("go", "mod", "edit", "-replace", Module+"="+moduleRoot)
	// The libraries the service requires, each a module of its own here:
	// the same replace for each (Go ignores the service's own).
	for _, m := range regexp.MustCompile(`(?m)^\s*(`+regexp.QuoteMeta(Module)+`/\S+) => \./(\S+)$`).FindAllStringSubmatch(string(goMod), -1) {
		run("go", "mod", "edit", "-replace", m[1]+"="+filepath.Join(moduleRoot, m[2]))
	}
	run("go", "mod", "tidy")
	sum, err := os.ReadFile(filepath.Join(host, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sum, []byte("aws-sdk-go-v2/service/sqs ")) {
		t.Fatal("the host's go.sum lists the SQS client: this test no longer shows that the functions build without it")
	}

	start := time.Now()
	out := run(cdk, "synth", "--quiet", "--no-notices")
	t.Logf("cdk synth (go run . with the build cache of this machine) took %s; it printed: %q", time.Since(start).Round(time.Second), out)

	b, err := os.ReadFile(filepath.Join(host, "cdk.out", "Shop.template.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tmpl map[string]any
	if err := json.Unmarshal(b, &tmpl); err != nil {
		t.Fatal(err)
	}
	// The construct's functions and alarms, its outputs, and the app's own
	// role, queue and topic.
	fns := resources(tmpl, "AWS::Lambda::Function")
	if want := len(Functions) - 1; len(fns) != want { // no example subscriber (audit)
		t.Errorf("%d functions in the template, want %d", len(fns), want)
	}
	if n := len(resources(tmpl, "AWS::CloudWatch::Alarm")); n != 18 {
		t.Errorf("%d alarms, want 18", n)
	}
	outs, _ := tmpl["Outputs"].(map[string]any)
	for _, o := range []string{"ApiUrl", "ApiId", "TableName", "EventBusName", "EventBusArn", "OnFailureQueueUrl", "RepublishFunctionName"} {
		if outs[o] == nil {
			t.Errorf("no output %s", o)
		}
	}
	for _, r := range []struct{ typ, prefix string }{{"AWS::IAM::Role", "Checkout"}, {"AWS::SQS::Queue", "Consumed"}, {"AWS::SNS::Topic", "Pager"}} {
		found := false
		for id := range resources(tmpl, r.typ) {
			found = found || strings.HasPrefix(id, r.prefix)
		}
		if !found {
			t.Errorf("no %s %s* in the template", r.typ, r.prefix)
		}
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
