package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeSaysWhatMakeTestRuns: the README's line for `make test` names
// every make target its recipe runs, directly or through the lanes it runs
// at once (make test-*; today make lint, and make e2e, which synthesizes
// the stack and runs it here), says that the lanes run at once, and says
// "then make X" of a target that ends a lane (today make e2e): a reader who
// sees them run should know they belong, and what comes last.
func TestReadmeSaysWhatMakeTestRuns(t *testing.T) {
	recipes := map[string][]string{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):.*\n((?:\t.*\n)+)`).FindAllStringSubmatch(readFile(t, "Makefile"), -1) {
		recipes[m[1]] = strings.Split(strings.TrimRight(m[2], "\n"), "\n")
	}
	if recipes["test"] == nil {
		t.Fatal("Makefile: no test recipe")
	}
	// The targets a recipe runs: the words after $(MAKE) that are not flags;
	// a lane (test-*) is followed into its own recipe. last: the targets
	// that are the last step of the recipe that runs them.
	var named, last []string
	lanes := 0
	var walk func(target string)
	walk = func(target string) {
		for i, line := range recipes[target] {
			_, after, ok := strings.Cut(line, "$(MAKE)")
			if !ok {
				continue
			}
			for _, w := range strings.Fields(after) {
				switch {
				case strings.HasPrefix(w, "-"):
				case strings.HasPrefix(w, "test-"):
					if recipes[w] == nil {
						t.Fatalf("Makefile: make test runs %s, which has no recipe", w)
					}
					lanes++
					walk(w)
				default:
					named = append(named, w)
					if i == len(recipes[target])-1 {
						last = append(last, w)
					}
				}
			}
		}
	}
	walk("test")
	if len(named) == 0 {
		t.Fatal("make test runs no other make target: update this test (it reads the Makefile's test recipe and its test-* lanes)")
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
	for _, target := range named {
		if !strings.Contains(line, "make "+target) {
			t.Errorf("README.md's line for make test does not name make %s, which it runs:\n%s", target, line)
		}
	}
	for _, target := range last {
		if !strings.Contains(line, "then make "+target) {
			t.Errorf("README.md's line for make test does not say \"then make %s\" (the last step of its lane):\n%s", target, line)
		}
	}
	if lanes > 1 && !strings.Contains(line, "at once") {
		t.Errorf("README.md's line for make test does not say that its %d lanes run at once:\n%s", lanes, line)
	}
}

// TestFullSizeNamesEveryScaledTest: a test that sizes its load with
// testkit.Scale runs at a twentieth of it under -race, so make test must run it
// in full too: the Makefile's FULL_SIZE names exactly those tests, and its
// full-size run (FULL_SIZE_PKGS) covers their packages.
func TestFullSizeNamesEveryScaledTest(t *testing.T) {
	mk := readFile(t, "Makefile")
	m := regexp.MustCompile(`(?m)^FULL_SIZE := \^\(([^)]*)\)\$\$$`).FindStringSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no FULL_SIZE := ^(TestA|TestB)$$ line")
	}
	listed := strings.Split(m[1], "|")
	p := regexp.MustCompile(`(?m)^FULL_SIZE_PKGS := (.*)$`).FindStringSubmatch(mk)
	if p == nil || !strings.Contains(mk, "-run '$(FULL_SIZE)' $(FULL_SIZE_PKGS)\n") {
		t.Fatal("Makefile: no FULL_SIZE_PKGS := ./a ./b line, or no go test -run '$(FULL_SIZE)' $(FULL_SIZE_PKGS)")
	}
	pkgs := strings.Fields(p[1])
	var scaled []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "cdk.out") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(src), "testkit.Scale(") {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			calls := false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Scale" {
						if x, ok := sel.X.(*ast.Ident); ok && x.Name == "testkit" {
							calls = true
						}
					}
				}
				return !calls
			})
			if !calls {
				continue
			}
			scaled = append(scaled, fn.Name.Name)
			if dir, _ := filepath.Rel(root, filepath.Dir(path)); !slices.Contains(pkgs, "./"+dir) {
				t.Errorf("%s scales its load, but make test's full-size run does not cover ./%s", fn.Name.Name, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(scaled)
	slices.Sort(listed)
	if !slices.Equal(scaled, listed) {
		t.Errorf("Makefile FULL_SIZE lists %v; the tests that call testkit.Scale are %v", listed, scaled)
	}
}
