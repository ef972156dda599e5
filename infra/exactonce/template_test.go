package exactonce

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/template-*.json from this tree")

// TestSingleRegionTemplate: the single-Region stack's template, default and
// with every option on, is byte for byte the one in testdata (written from
// the tree before multi-Region support: without exactonce:regions the app
// is exactly what it was). A change meant to alter the template rewrites
// the files with `go test ./infra/exactonce -run TestSingleRegionTemplate -update`,
// and the diff of testdata shows the change.
func TestSingleRegionTemplate(t *testing.T) {
	for name, p := range map[string]Props{"default": {}, "full": fullProps()} {
		p.StackLogicalIds = true
		_, tmpl := synthStack(t, "ExactOnce", p)
		got, err := json.MarshalIndent(tmpl, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		path := moduleRoot + "/infra/exactonce/testdata/template-" + name + ".json"
		if *update {
			if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(append(got, '\n'), want) {
			t.Errorf("%s: the single-Region template changed (-want +got):\n%s", name, lineDiff(string(want), string(got)+"\n"))
		}
	}
}
