package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/exactonce/exactonce/api"
)

// TestErrorCodesAreTheDeclaredOnes: the document's error codes (the Error
// schema's enum) are exactly the ones the Go code declares, each once: the
// API's in client/codes and the idempotency keys' in package idempotency
// (every Code constant of those files; the service and the client use them).
func TestErrorCodesAreTheDeclaredOnes(t *testing.T) {
	m := regexp.MustCompile(`(?s)\n    Error:\n.*?error:\n\s+type: string\n\s+enum: \[([^\]]*)\]`).FindSubmatch(api.OpenAPI)
	if m == nil {
		t.Fatal("openapi.yaml: no enum on Error.error")
	}
	var documented []string
	for _, c := range strings.Split(string(m[1]), ",") {
		documented = append(documented, strings.TrimSpace(c))
	}
	var declared []string
	for _, file := range []string{"../client/codes/codes.go", "../idempotency/record.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok || spec.Type == nil || spec.Type.(*ast.Ident).Name != "Code" {
				return true
			}
			for _, v := range spec.Values {
				s, err := strconv.Unquote(v.(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				declared = append(declared, s)
			}
			return true
		})
	}
	slices.Sort(documented)
	slices.Sort(declared)
	if len(declared) < 20 || !slices.Equal(documented, declared) {
		t.Errorf("openapi.yaml's error codes:\n%v\ndeclared in client/codes and idempotency:\n%v", documented, declared)
	}
}
