package docs_test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	doKeyRE    = regexp.MustCompile(`\.Do\(ctx, "([^"]+)"`)
	shellKeyRE = regexp.MustCompile(`/keys/([^/\s'"]+)`)
)

// TestDoSamplesHaveTheirOwnKeys: an idempotency key a Go sample of the
// pages passes to client.Do is no key the pages' shell examples use. A
// reader who ran the HTTP API page's examples and then the Go client's
// sample on the same make run would otherwise get the key those examples
// completed with another fingerprint: 422 fingerprint_mismatch, not the
// sample's effect.
func TestDoSamplesHaveTheirOwnKeys(t *testing.T) {
	shellKeys := map[string]string{} // key → page:line that uses it
	doKeys := map[string]string{}
	for _, page := range pages(t) {
		for _, b := range parse(t, page).blocks {
			text := strings.Join(b.lines, "\n")
			switch b.lang {
			case "sh", "shell", "bash":
				for _, m := range shellKeyRE.FindAllStringSubmatch(text, -1) {
					shellKeys[m[1]] = page
				}
			case "go":
				for _, m := range doKeyRE.FindAllStringSubmatch(text, -1) {
					doKeys[m[1]] = page
				}
			}
		}
	}
	if len(doKeys) == 0 {
		t.Fatal("no Go sample calls Do: this test lost what it checks")
	}
	for key, page := range doKeys {
		t.Logf("%s: Do with key %q", page, key)
		if other, ok := shellKeys[key]; ok {
			t.Errorf("%s: a Do sample uses the key %q, which the shell examples of %s use too: run after them on the same make run it answers 422 fingerprint_mismatch (give the sample its own key)", page, key, other)
		}
	}
}

// TestGoClientPageShowsHowToConnect: the Go client's page gives what a
// first program needs: the import path (the module's path and /client), every
// Option the package has (found in client/*.go, so a new one must be
// documented), and the two ways to authenticate to a deployed API, SigV4
// from an aws.Config and a bearer token, in Go blocks (so they compile).
func TestGoClientPageShowsHowToConnect(t *testing.T) {
	page := readFile(t, "docs/go-client.md")
	module := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindStringSubmatch(readFile(t, "go.mod"))
	if module == nil {
		t.Fatal("go.mod: no module line")
	}
	var code strings.Builder
	for _, b := range parse(t, "docs/go-client.md").blocks {
		if b.lang == "go" {
			code.WriteString(strings.Join(b.lines, "\n"))
		}
	}
	if path := `"` + module[1] + `/client"`; !strings.Contains(code.String(), path) {
		t.Errorf("docs/go-client.md: no Go block imports %s", path)
	}
	for _, opt := range exportedOptions(t) {
		if !strings.Contains(page, "client."+opt) {
			t.Errorf("docs/go-client.md does not name the option client.%s", opt)
		}
	}
	for _, call := range []string{"config.LoadDefaultConfig(", "client.WithSigV4(", "client.WithBearerToken("} {
		if !strings.Contains(code.String(), call) {
			t.Errorf("docs/go-client.md: no Go block calls %s", call)
		}
	}
}

// exportedOptions are the functions of package client that return an Option.
func exportedOptions(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, f := range goFiles(t, "client") {
		for _, m := range regexp.MustCompile(`(?m)^func (With\w+)\(.*\) Option \{`).FindAllStringSubmatch(f, -1) {
			out = append(out, m[1])
		}
	}
	if len(out) == 0 {
		t.Fatal("client/: no func With…(…) Option found")
	}
	return out
}

// goFiles are the non-test Go files of a folder of the module.
func goFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if !strings.HasSuffix(n, "_test.go") {
			out = append(out, readFile(t, rel(n)))
		}
	}
	return out
}

// TestGoClientPageSaysWhenDoRunsFnAgain: the page's Do section names both
// ways fn can run twice under a key, each after its lease ends: fn outlives
// the lease, or fn's result cannot be stored (not JSON, or over
// idempotency.MaxHostedResponseBytes), which the hosted keys hold only until
// the lease ends (they have no hold).
func TestGoClientPageSaysWhenDoRunsFnAgain(t *testing.T) {
	page := readFile(t, "docs/go-client.md")
	_, do, ok := strings.Cut(page, "## Do:")
	if !ok {
		t.Fatal("docs/go-client.md: no section \"## Do:\"")
	}
	do, _, _ = strings.Cut(do, "\n## ")
	for _, want := range []string{"MaxHostedResponseBytes", "ErrResponseNotStored", "ErrLeaseLost", "lease ends"} {
		if !strings.Contains(do, want) {
			t.Errorf("docs/go-client.md, section Do: does not say %q (when fn can run again under its key)", want)
		}
	}
}
