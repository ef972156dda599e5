package exactonce

import (
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
// or a host CDK app's module). The build is reproducible (-trimpath, no build
// id, no VCS stamp), so the same source gives the same bytes and therefore
// the same asset hash on every synth. Builds with the "xray" tag are needed
// when Props.Tracing is set.
func BuildFunctions(dir, outDir string, tags ...string) error {
	for _, name := range Functions {
		fnDir := filepath.Join(outDir, name)
		if err := os.MkdirAll(fnDir, 0o755); err != nil {
			return err
		}
		cmd := exec.Command("go", "build", "-tags", strings.Join(append([]string{"lambda.norpc"}, tags...), ","), "-trimpath", "-buildvcs=false",
			"-ldflags", "-s -w -buildid=", "-o", filepath.Join(fnDir, "bootstrap"), Module+"/functions/"+name)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build %s: %w", name, err)
		}
	}
	return nil
}

// AssetCode is Props.Code for the folder BuildFunctions wrote:
// dir/<name>/bootstrap becomes each function's asset.
func AssetCode(dir string) func(name string) awslambda.Code {
	return func(name string) awslambda.Code {
		return awslambda.Code_FromAsset(jsii.String(filepath.Join(dir, name)), nil)
	}
}
