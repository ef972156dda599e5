package docs_test

import (
	"go/version"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// floorRE is how a page states the lowest Go release: "**Go 1.26.0** or later".
var floorRE = regexp.MustCompile(`\*\*Go (\d+\.\d+(?:\.\d+)?)\*\* or later`)

// goLineRE is a go.mod's go directive.
var goLineRE = regexp.MustCompile(`(?m)^go\s+(\S+)\s*$`)

// TestGoFloorHoldsForEveryModule: the README states the lowest Go release
// once ("**Go X** or later", the go line of the root go.mod), no other page
// states another, and no module of the repository (the product's go.mod,
// tools/go.mod with golangci-lint, and any module added later: every go.mod
// outside hidden folders and testdata) has a go line above it. A go line
// above the floor makes the go command refuse that module on a release the
// README says is enough (with GOTOOLCHAIN=local; without it, it downloads a
// newer one).
func TestGoFloorHoldsForEveryModule(t *testing.T) {
	var floor string
	for _, page := range pages(t) {
		for _, m := range floorRE.FindAllStringSubmatch(readFile(t, page), -1) {
			switch {
			case page != "README.md":
				t.Errorf("%s states the Go floor (%s) again: the README states it once, link there", page, m[0])
			case floor != "" && floor != m[1]:
				t.Errorf("README.md states two Go floors: %s and %s", floor, m[1])
			default:
				floor = m[1]
			}
		}
	}
	if floor == "" {
		t.Fatal(`README.md does not state the Go floor as "**Go X** or later"`)
	}
	modules := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		modules++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		m := goLineRE.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: no go line", rel(path))
			return nil
		}
		goLine := string(m[1])
		t.Logf("%s: go %s (floor %s)", rel(path), goLine, floor)
		if version.Compare("go"+goLine, "go"+floor) > 0 {
			t.Errorf("%s: go %s is above the floor the README states (Go %s or later): with Go %s and GOTOOLCHAIN=local the go command refuses this module; lower its go line (nothing it requires needs more) or raise the floor everywhere",
				rel(path), goLine, floor, floor)
		}
		if rel(path) == "go.mod" && goLine != floor {
			t.Errorf("go.mod: go %s, but the README says the floor is its go line (%s)", goLine, floor)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if modules < 2 {
		t.Errorf("found %d go.mod files, want at least go.mod and tools/go.mod", modules)
	}
}
