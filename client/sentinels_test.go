package client_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	"github.com/exactonce/exactonce/client"
	"github.com/exactonce/exactonce/idempotency"
)

// TestEveryCodeHasASentinel: "every answer other than success is a
// *client.Error … matched by errors.Is with a sentinel per code"
// (docs/go-client.md): each code client/codes declares is matched by one of
// the client's sentinels, and so is each idempotency-key code. (internal
// had none.)
func TestEveryCodeHasASentinel(t *testing.T) {
	sentinels := []error{
		client.ErrInvalidRequest, client.ErrTooLarge, client.ErrNotFound, client.ErrExists,
		client.ErrAlreadyUsed, client.ErrCanceled, client.ErrExpired, client.ErrNotActive,
		client.ErrInvalidPIN, client.ErrPINRequired, client.ErrLocked, client.ErrKeyReused,
		client.ErrFingerprintMismatch, client.ErrInProgress, client.ErrLeaseLost, client.ErrKeyCompleted,
		client.ErrForbidden, client.ErrUnavailable, client.ErrNoUsesLeft, client.ErrUseNotFound,
		client.ErrNotReleasable, client.ErrInternal,
	}
	f, err := parser.ParseFile(token.NewFileSet(), "codes/codes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	ast.Inspect(f, func(n ast.Node) bool {
		if v, ok := n.(*ast.ValueSpec); ok && len(v.Values) == 1 {
			if lit, ok := v.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				declared = append(declared, s)
			}
		}
		return true
	})
	if len(declared) < 15 {
		t.Fatalf("read %d codes from codes/codes.go: %v", len(declared), declared)
	}
	for _, c := range []idempotency.Code{idempotency.CodeNotFound, idempotency.CodeFingerprintMismatch,
		idempotency.CodeInProgress, idempotency.CodeLeaseLost, idempotency.CodeCompleted} {
		declared = append(declared, string(c))
	}
	for _, code := range declared {
		e := &client.Error{Status: 500, Code: code}
		matched := 0
		for _, s := range sentinels {
			if errors.Is(e, s) {
				matched++
			}
		}
		if matched != 1 {
			t.Errorf("code %q is matched by %d sentinels, want 1", code, matched)
		}
	}
}
