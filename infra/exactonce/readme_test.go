package exactonce

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeExample: the README's "Embed in your CDK app" code is Example,
// word for word, so what readers copy compiles and runs.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(moduleRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(moduleRoot, "infra", "exactonce", "example_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	block := func(s, start, end string) string {
		i := strings.Index(s, start)
		if i < 0 {
			return ""
		}
		j := strings.Index(s[i:], end)
		if j < 0 {
			return ""
		}
		return s[i : i+j]
	}
	want := block(string(example), "func Example() {", "\n}\n")
	if got := block(string(readme), "func Example() {", "\n}\n```"); want == "" || got != want {
		t.Errorf("README's example differs from example_test.go's Example:\nREADME:\n%s\nexample_test.go:\n%s", got, want)
	}
}
