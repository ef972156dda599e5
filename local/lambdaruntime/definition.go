package lambdaruntime

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Definition is what a template tells Lambda about a function
// (AWS::Lambda::Function): its code, runtime and handler, architecture,
// memory, timeout, tracing and environment.
type Definition struct {
	Name          string   // the function's name (AWS_LAMBDA_FUNCTION_NAME)
	CodeDir       string   // the code asset, unzipped: Lambda's /var/task
	Runtime       string   // e.g. provided.al2023
	Handler       string   // e.g. bootstrap (an OS-only runtime ignores it)
	Architectures []string // default [x86_64], as Lambda's
	MemoryMB      int      // default 128
	TimeoutS      int      // default 3
	Tracing       bool     // TracingConfig.Mode Active
	LogFormat     string   // LoggingConfig.LogFormat (Text or JSON)
	Env           map[string]string
}

// Lambda's limits that CreateFunction checks.
const (
	MinMemoryMB = 128
	MaxMemoryMB = 10240
	MaxTimeoutS = 900
	// MaxEnvBytes is the total size of a function's environment variables
	// (keys and values) Lambda accepts.
	MaxEnvBytes = 4096
)

// osOnlyRuntimes run the code's own bootstrap executable.
var osOnlyRuntimes = []string{"provided.al2023", "provided.al2"}

// blockedRuntimes are deprecated runtimes Lambda no longer creates or
// updates functions on.
var blockedRuntimes = []string{"go1.x", "provided", "nodejs", "nodejs4.3", "nodejs6.10", "nodejs8.10", "nodejs10.x", "nodejs12.x",
	"nodejs14.x", "nodejs16.x", "python2.7", "python3.6", "python3.7", "python3.8", "dotnetcore1.0", "dotnetcore2.0", "dotnetcore2.1",
	"dotnetcore3.1", "dotnet6", "ruby2.5", "ruby2.7", "java8"}

// reservedEnv are variables Lambda sets itself; CreateFunction refuses a
// function that sets them.
var reservedEnv = []string{"_HANDLER", "_X_AMZN_TRACE_ID", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_EXECUTION_ENV",
	"AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_VERSION", "AWS_LAMBDA_INITIALIZATION_TYPE",
	"AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_LOG_STREAM_NAME", "AWS_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
	"AWS_SESSION_TOKEN", "AWS_LAMBDA_RUNTIME_API", "LAMBDA_TASK_ROOT", "LAMBDA_RUNTIME_DIR"}

// DeployError is a definition CreateFunction (so `cdk deploy`) refuses.
type DeployError struct{ Function, Reason string }

func (e *DeployError) Error() string {
	return fmt.Sprintf("function %s: Lambda refuses the definition at deploy: %s", e.Function, e.Reason)
}

// InitError is a function Lambda creates but whose every invocation fails
// before the code runs, with the error type Lambda reports.
type InitError struct{ Function, Type, Reason string }

func (e *InitError) Error() string {
	return fmt.Sprintf("function %s: every invocation fails %s: %s", e.Function, e.Type, e.Reason)
}

// Check reports what CreateFunction would refuse of d.
func (d Definition) Check() error {
	bad := func(format string, a ...any) error {
		return &DeployError{Function: d.Name, Reason: fmt.Sprintf(format, a...)}
	}
	switch {
	case slices.Contains(blockedRuntimes, d.Runtime):
		return bad("Runtime %s is deprecated: Lambda no longer creates or updates functions on it (use provided.al2023)", d.Runtime)
	case !slices.Contains(osOnlyRuntimes, d.Runtime) && managedRuntime(d.Runtime) == "":
		return bad("Runtime %q is not a Lambda runtime", d.Runtime)
	case managedRuntime(d.Runtime) != "" && d.Handler == "":
		return bad("Runtime %s needs a Handler", d.Runtime)
	case len(d.Architectures) > 1:
		return bad("Architectures %v: a function has exactly one", d.Architectures)
	case len(d.Architectures) == 1 && d.Architectures[0] != "arm64" && d.Architectures[0] != "x86_64":
		return bad("Architectures %v: arm64 or x86_64", d.Architectures)
	case d.MemoryMB != 0 && (d.MemoryMB < MinMemoryMB || d.MemoryMB > MaxMemoryMB):
		return bad("MemorySize %d is not from %d to %d MB", d.MemoryMB, MinMemoryMB, MaxMemoryMB)
	case d.TimeoutS != 0 && (d.TimeoutS < 1 || d.TimeoutS > MaxTimeoutS):
		return bad("Timeout %d is not from 1 to %d seconds", d.TimeoutS, MaxTimeoutS)
	}
	size := 0
	for k, v := range d.Env {
		if slices.Contains(reservedEnv, k) {
			return bad("environment variable %s is reserved (Lambda sets it)", k)
		}
		size += len(k) + len(v)
	}
	if size > MaxEnvBytes {
		return bad("its environment variables take %d bytes; Lambda accepts at most %d", size, MaxEnvBytes)
	}
	return nil
}

// Architecture is d's architecture as Lambda reads it (x86_64 when unset).
func (d Definition) Architecture() string {
	if len(d.Architectures) == 0 {
		return "x86_64"
	}
	return d.Architectures[0]
}

// managedRuntime is the language of a managed runtime ("" for another).
func managedRuntime(r string) string {
	for _, lang := range []string{"nodejs", "python", "java", "dotnet", "ruby"} {
		if strings.HasPrefix(r, lang) {
			return lang
		}
	}
	return ""
}

// Command is how Lambda starts d's execution environment, as argv on this
// machine: the code's bootstrap, under qemu-user when d's architecture is
// not this machine's. It fails as the invocations would fail in Lambda: a
// managed runtime that cannot find its handler in the code, a bootstrap that
// is missing or is not an executable of d's architecture.
func (d Definition) Command() ([]string, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	initErr := func(typ, format string, a ...any) error {
		return &InitError{Function: d.Name, Type: typ, Reason: fmt.Sprintf(format, a...)}
	}
	files := codeFiles(d.CodeDir)
	if lang := managedRuntime(d.Runtime); lang != "" {
		want := handlerFiles(lang, d.Handler)
		for _, f := range want {
			if slices.Contains(files, f) {
				return nil, initErr("Runtime.ImportModuleError", "Runtime %s loads Handler %s from %s; the local stack runs only OS-only runtimes (%s)",
					d.Runtime, d.Handler, f, strings.Join(osOnlyRuntimes, ", "))
			}
		}
		return nil, initErr("Runtime.ImportModuleError", "Runtime %s loads Handler %q from %s, which the code does not have (it holds %s: an executable for an OS-only runtime such as provided.al2023)",
			d.Runtime, d.Handler, strings.Join(want, " or "), strings.Join(files, ", "))
	}
	boot := filepath.Join(d.CodeDir, "bootstrap")
	st, err := os.Stat(boot)
	if err != nil || st.IsDir() {
		return nil, initErr("Runtime.InvalidEntrypoint", "Runtime %s runs the code's bootstrap, which the code does not have (it holds %s)", d.Runtime, strings.Join(files, ", "))
	}
	if st.Mode().Perm()&0o111 == 0 {
		return nil, initErr("Runtime.InvalidEntrypoint", "fork/exec /var/task/bootstrap: permission denied (the bootstrap is not executable)")
	}
	arch, err := ExecutableArch(boot)
	if err != nil {
		return nil, initErr("Runtime.InvalidEntrypoint", "fork/exec /var/task/bootstrap: exec format error (%v)", err)
	}
	if arch != d.Architecture() {
		return nil, initErr("Runtime.InvalidEntrypoint", "fork/exec /var/task/bootstrap: exec format error (the bootstrap is an %s executable; the function's Architectures is %s)",
			arch, d.Architecture())
	}
	if arch == hostArch() {
		return []string{boot}, nil
	}
	emu := map[string]string{"arm64": "qemu-aarch64-static", "x86_64": "qemu-x86_64-static"}[arch]
	path, err := exec.LookPath(emu)
	if err != nil {
		return nil, fmt.Errorf("function %s is %s and this machine is %s: %s runs it, and it is not installed (apt-get install qemu-user-static; make e2e and .ci/run install it)",
			d.Name, arch, hostArch(), emu)
	}
	return []string{path, boot}, nil
}

// Environment is what Lambda adds to d's own variables: the runtime API,
// the function's identity, region, log format, handler, task root, tracing.
func (d Definition) Environment(region string) []string {
	mem := d.MemoryMB
	if mem == 0 {
		mem = 128
	}
	env := []string{
		"AWS_LAMBDA_FUNCTION_NAME=" + d.Name, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=" + strconv.Itoa(mem),
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST", "AWS_LAMBDA_INITIALIZATION_TYPE=on-demand",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/" + d.Name, "AWS_LAMBDA_LOG_STREAM_NAME=local",
		"AWS_REGION=" + region, "AWS_DEFAULT_REGION=" + region,
		"_HANDLER=" + d.Handler, "LAMBDA_TASK_ROOT=" + d.CodeDir, "LAMBDA_RUNTIME_DIR=" + d.CodeDir,
		"TZ=:UTC", "LANG=en_US.UTF-8",
	}
	if d.LogFormat == "JSON" {
		env = append(env, "AWS_LAMBDA_LOG_FORMAT=JSON")
	}
	if d.Tracing {
		env = append(env, "AWS_XRAY_CONTEXT_MISSING=LOG_ERROR")
	}
	keys := make([]string, 0, len(d.Env))
	for k := range d.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+d.Env[k])
	}
	return env
}

// ExecutableArch is the Lambda architecture (arm64, x86_64) of an ELF
// executable.
func ExecutableArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", errors.New("not an ELF executable")
	}
	defer f.Close()
	switch f.Machine {
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_X86_64:
		return "x86_64", nil
	}
	return "", fmt.Errorf("an executable for %s, which Lambda does not run", f.Machine)
}

func hostArch() string {
	if runtime.GOARCH == "amd64" {
		return "x86_64"
	}
	return runtime.GOARCH
}

// handlerFiles are the files a managed runtime loads a handler from.
func handlerFiles(lang, handler string) []string {
	mod, _, _ := strings.Cut(handler, "::")
	switch lang {
	case "nodejs":
		base := handler[:max(strings.LastIndex(handler, "."), 0)]
		return []string{base + ".js", base + ".mjs", base + ".cjs"}
	case "python":
		base := handler[:max(strings.LastIndex(handler, "."), 0)]
		return []string{strings.ReplaceAll(base, ".", "/") + ".py"}
	case "ruby":
		base := handler[:max(strings.LastIndex(handler, "."), 0)]
		return []string{base + ".rb"}
	case "dotnet":
		return []string{mod + ".dll"}
	}
	return []string{strings.ReplaceAll(mod, ".", "/") + ".class", "a .jar under lib/"}
}

// codeFiles lists the code's files (relative, sorted), for messages.
func codeFiles(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	if len(out) == 0 {
		return []string{"nothing"}
	}
	return out
}
