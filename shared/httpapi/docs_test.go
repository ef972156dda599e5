package httpapi_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsListEveryOutcome: the metrics table's Outcome list (docs/operating.md) names every
// outcome the handlers can record: each success outcome they set and each
// error code of the API (client/codes) and of the key lifecycle
// (idempotency).
func TestDocsListEveryOutcome(t *testing.T) {
	t.Parallel()
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(docs), "\n") {
		if strings.HasPrefix(l, "| `Requests` (Count)") {
			row = l
		}
	}
	if row == "" {
		t.Fatal("the docs lost the metrics table's Requests row")
	}
	literal := regexp.MustCompile(`"([a-z_]+)"`)
	outcomes := map[string]bool{}
	sources, _ := filepath.Glob("*.go")
	sources = append(sources, "../../client/codes/codes.go", "../../idempotency/record.go")
	for _, f := range sources {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "outcome = ") || strings.Contains(l, "keyAnswer(err") || strings.Contains(l, " Code = \"") {
				for _, m := range literal.FindAllStringSubmatch(l, -1) {
					if m[1] != "true" { // the Idempotent-Replayed header's value
						outcomes[m[1]] = true
					}
				}
			}
		}
	}
	if len(outcomes) < 20 {
		t.Fatalf("found only %d outcomes in the source: %v", len(outcomes), outcomes)
	}
	for o := range outcomes {
		if !strings.Contains(row, "`"+o+"`") {
			t.Errorf("the metrics table's Outcome list misses %s", o)
		}
	}
}
