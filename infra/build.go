package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Functions lists every Lambda the stack can deploy (folders under
// functions/); audit only with exactonce:exampleSubscriber=true.
var Functions = []string{"create", "get", "consume", "cancel", "keyclaim", "keycomplete", "keyrelease", "keyget", "publisher", "sweeper", "republish", "audit"}

// BuildFunctions compiles each function for Lambda (linux/arm64, static,
// lambda.norpc plus the given build tags) into outDir/<name>/bootstrap. The build is reproducible
// (-trimpath, no build id, no VCS stamp), so the same source gives the same
// bytes and therefore the same asset hash on every synth.
func BuildFunctions(repoRoot, outDir string, tags ...string) error {
	for _, name := range Functions {
		dir := filepath.Join(outDir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		cmd := exec.Command("go", "build", "-tags", strings.Join(append([]string{"lambda.norpc"}, tags...), ","), "-trimpath", "-buildvcs=false",
			"-ldflags", "-s -w -buildid=", "-o", filepath.Join(dir, "bootstrap"), "./functions/"+name)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build %s: %w", name, err)
		}
	}
	return nil
}
