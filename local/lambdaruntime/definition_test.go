package lambdaruntime

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// elfHeader is the 64-byte header of a little-endian 64-bit executable for
// machine (183 aarch64, 62 x86-64): enough for debug/elf to tell its
// architecture.
func elfHeader(machine uint16) []byte {
	h := make([]byte, 64)
	copy(h, "\x7fELF\x02\x01\x01")
	binary.LittleEndian.PutUint16(h[16:], 2) // ET_EXEC
	binary.LittleEndian.PutUint16(h[18:], machine)
	binary.LittleEndian.PutUint32(h[20:], 1)
	binary.LittleEndian.PutUint16(h[52:], 64)
	binary.LittleEndian.PutUint16(h[54:], 56)
	binary.LittleEndian.PutUint16(h[58:], 64)
	return h
}

func code(t *testing.T, files map[string][]byte) string {
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestDefinitionAsLambdaRunsIt: what CreateFunction refuses, and what
// Lambda creates but cannot start (another architecture's bootstrap, a
// managed runtime looking for its handler file), fail naming the cause.
func TestDefinitionAsLambdaRunsIt(t *testing.T) {
	arm := code(t, map[string][]byte{"bootstrap": elfHeader(183)})
	x86 := code(t, map[string][]byte{"bootstrap": elfHeader(62)})
	script := code(t, map[string][]byte{"bootstrap": []byte("#!/bin/sh\n")})
	ok := Definition{Name: "f", CodeDir: arm, Runtime: "provided.al2023", Handler: "bootstrap", Architectures: []string{"arm64"}, MemoryMB: 256, TimeoutS: 10}
	with := func(change func(*Definition)) Definition { d := ok; change(&d); return d }
	for _, tc := range []struct {
		name   string
		def    Definition
		deploy bool   // a DeployError
		want   string // in the error ("" : runs)
	}{
		{"as synthesized", ok, false, ""},
		{"x86_64 for an arm64 bootstrap", with(func(d *Definition) { d.Architectures = []string{"x86_64"} }), false,
			"Runtime.InvalidEntrypoint: fork/exec /var/task/bootstrap: exec format error (the bootstrap is an arm64 executable; the function's Architectures is x86_64)"},
		{"no Architectures is x86_64", with(func(d *Definition) { d.Architectures = nil }), false, "Architectures is x86_64"},
		{"an x86_64 bootstrap declared arm64", with(func(d *Definition) { d.CodeDir = x86 }), false, "the bootstrap is an x86_64 executable"},
		{"a bootstrap that is not an executable", with(func(d *Definition) { d.CodeDir = script }), false, "exec format error"},
		{"no bootstrap", with(func(d *Definition) { d.CodeDir = t.TempDir() }), false, "Runtime.InvalidEntrypoint"},
		{"nodejs with a handler", with(func(d *Definition) { d.Runtime, d.Handler = "nodejs22.x", "index.handler" }), false,
			`Runtime.ImportModuleError: Runtime nodejs22.x loads Handler "index.handler" from index.js or index.mjs or index.cjs`},
		{"python with a handler", with(func(d *Definition) { d.Runtime, d.Handler = "python3.13", "app.handler" }), false, "from app.py"},
		{"go1.x", with(func(d *Definition) { d.Runtime = "go1.x" }), true, "deprecated"},
		{"not a runtime", with(func(d *Definition) { d.Runtime = "provided.al2025" }), true, "is not a Lambda runtime"},
		{"memory", with(func(d *Definition) { d.MemoryMB = 64 }), true, "MemorySize 64"},
		{"timeout", with(func(d *Definition) { d.TimeoutS = 901 }), true, "Timeout 901"},
		{"reserved variable", with(func(d *Definition) { d.Env = map[string]string{"AWS_REGION": "x"} }), true, "AWS_REGION is reserved"},
		{"environment over 4 KB", with(func(d *Definition) { d.Env = map[string]string{"EXACTONCE_TENANTS": strings.Repeat("x", 4090)} }), true, "4107 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, err := tc.def.Command()
			var de *DeployError
			switch {
			case tc.want == "" && err != nil && !strings.Contains(err.Error(), "qemu"):
				t.Fatalf("refused: %v", err)
			case tc.want == "" && err == nil && (len(argv) == 0 || !strings.HasSuffix(argv[len(argv)-1], "bootstrap")):
				t.Fatalf("argv %v", argv)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			case tc.want != "" && errors.As(err, &de) != tc.deploy:
				t.Fatalf("err %T %v: deploy-time %v, want %v", err, err, !tc.deploy, tc.deploy)
			}
		})
	}
	if runtime.GOARCH == "arm64" {
		if argv, _ := ok.Command(); len(argv) != 1 {
			t.Errorf("on arm64 the bootstrap runs itself: %v", argv)
		}
	}
}
