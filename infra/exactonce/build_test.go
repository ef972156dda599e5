package exactonce

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestAssetHashesStable builds the real functions twice and synthesizes
// twice: the bytes, and so every asset hash, are the same.
func TestAssetHashesStable(t *testing.T) {
	root := moduleRoot
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		if err := BuildFunctions(root, dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range Functions {
		x, _ := os.ReadFile(filepath.Join(a, f, "bootstrap"))
		y, _ := os.ReadFile(filepath.Join(b, f, "bootstrap"))
		if len(x) < 1<<20 || !bytes.Equal(x, y) {
			t.Fatalf("%s: builds differ or are too small (%d, %d bytes)", f, len(x), len(y))
		}
	}
	keys := func(dir string) string {
		_, tmpl := synth(t, Props{Code: AssetCode(dir)})
		var out []string
		for _, fn := range resources(tmpl, "AWS::Lambda::Function") {
			out = append(out, jsonOf(props(fn)["Code"].(map[string]any)["S3Key"]))
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	if ka, kb := keys(a), keys(b); ka != kb {
		t.Fatalf("asset keys differ across synths:\n%s\n%s", ka, kb)
	}
}
