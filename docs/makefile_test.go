package docs_test

import (
	"regexp"
	"strings"
	"testing"
)

// TestReadmeSaysWhatMakeTestRuns: the README's line for `make test` names
// the make target its recipe ends with (today `make e2e`, which synthesizes
// the stack and runs it here): a reader who sees it run should know it
// belongs.
func TestReadmeSaysWhatMakeTestRuns(t *testing.T) {
	makefile := readFile(t, "Makefile")
	recipe := regexp.MustCompile(`(?m)^test:.*\n((?:\t.*\n)+)`).FindStringSubmatch(makefile)
	if recipe == nil {
		t.Fatal("Makefile: no test recipe")
	}
	lines := strings.Split(strings.TrimRight(recipe[1], "\n"), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	sub := regexp.MustCompile(`^\$\(MAKE\)\s+(\S+)`).FindStringSubmatch(last)
	if sub == nil {
		t.Fatalf("make test no longer ends with another make target (%q): say in the README's line what it ends with, and update this test", last)
	}
	var line string
	for _, l := range strings.Split(readFile(t, "README.md"), "\n") {
		if strings.HasPrefix(l, "make test") {
			line = l
			break
		}
	}
	if line == "" {
		t.Fatal("README.md: no line for make test")
	}
	if !strings.Contains(line, "make "+sub[1]) {
		t.Errorf("README.md's line for make test does not say it ends with make %s (its recipe's last step):\n%s", sub[1], line)
	}
}
