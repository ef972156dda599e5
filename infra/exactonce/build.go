package exactonce

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
)

// Module is the Go module the functions are built from.
const Module = "github.com/exactonce/exactonce"

// Functions lists every Lambda the construct can deploy (folders under
// functions/); audit only with Props.ExampleSubscriber.
var Functions = []string{"create", "get", "consume", "cancel", "keyclaim", "keycomplete", "keyrelease", "keyget", "userlist", "usercancel", "userelease", "uselist", "publisher", "sweeper", "republish", "audit"}

// BuildFunctions compiles each function for Lambda (linux/arm64, static,
// lambda.norpc plus the given build tags) into outDir/<name>/bootstrap. dir
// is a folder of a Go module that is, or requires, Module (this repository,
// or a host CDK app's module). The functions are built in Module's own
// directory (found from dir with `go list -m`: a replace target or the
// module cache), against Module's own go.mod and go.sum, so the host
// module's go.sum needs entries only for what the host itself imports (the
// functions' SDK clients are not among them, and `go mod tidy` in the host
// keeps it that way). The build is reproducible (-trimpath, no build id, no
// VCS stamp), so the same source gives the same bytes and therefore the
// same asset hash on every synth. Builds with the "xray" tag are needed
// when Props.Tracing is set.
func BuildFunctions(dir, outDir string, tags ...string) error {
	modDir, err := ModuleDir(dir)
	if err != nil {
		return err
	}
	outDir, err = filepath.Abs(outDir)
	if err != nil {
		return err
	}
	// One go build for all: it compiles and links them in parallel, into a
	// folder of its own (each binary named by its package), then each moves
	// to <name>/bootstrap.
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	built, err := os.MkdirTemp(outDir, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(built)
	args := []string{"build", "-mod=readonly", "-tags", strings.Join(append([]string{"lambda.norpc"}, tags...), ","), "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -buildid=", "-o", built + string(filepath.Separator)}
	for _, name := range Functions {
		args = append(args, "./functions/"+name)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = modDir
	cmd.Env = append(goEnv(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build the functions in %s: %w", modDir, err)
	}
	for _, name := range Functions {
		fnDir := filepath.Join(outDir, name)
		if err := os.MkdirAll(fnDir, 0o755); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(built, name), filepath.Join(fnDir, "bootstrap")); err != nil {
			return err
		}
	}
	return nil
}

// ModuleDir is the directory of Module's source as the Go module in dir
// sees it: dir's own module root when it is Module, else the directory its
// requirement resolves to (a replace target, or the module cache after
// `go mod download`).
func ModuleDir(dir string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-json", Module)
	cmd.Dir = dir
	cmd.Env = goEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s in %s: %w: %s", Module, dir, err, strings.TrimSpace(stderr.String()))
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go list -m %s: %w", Module, err)
	}
	if m.Dir == "" {
		return "", fmt.Errorf("%s is not downloaded for the module in %s: run `go mod download %s` there", Module, dir, Module)
	}
	return m.Dir, nil
}

// goEnv is this process's environment for a go command run in another
// module: a go.work of the caller's must not pull that module into a
// workspace, and GOFLAGS such as -mod=vendor belong to the caller's module.
func goEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOWORK=") && !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	return append(env, "GOWORK=off")
}

// AssetCode is Props.Code for the folder BuildFunctions wrote:
// dir/<name>/bootstrap becomes each function's asset.
func AssetCode(dir string) func(name string) awslambda.Code {
	return func(name string) awslambda.Code {
		return awslambda.Code_FromAsset(jsii.String(filepath.Join(dir, name)), nil)
	}
}
