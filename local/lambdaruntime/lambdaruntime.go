// Package lambdaruntime runs a function's real bootstrap binary the way
// Lambda does, behind a local Lambda Runtime API (the 2018-06-01 HTTP
// protocol that aws-lambda-go polls), so tests and benchmarks exercise the
// function's main, its cold start and its handler as one process.
package lambdaruntime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

const prefix = "/2018-06-01/runtime/"

// Build compiles the main package pkg (e.g. "./functions/get", relative to
// dir) into out for this machine, as the Lambda build does apart from the
// target platform. Extra build tags are added to lambda.norpc.
func Build(dir, pkg, out string, tags ...string) error {
	cmd := exec.Command("go", "build", "-tags", strings.Join(append([]string{"lambda.norpc"}, tags...), ","),
		"-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// Result is what the function answered to one invocation.
type Result struct {
	Body []byte
	// Error is set when the function reported an invocation error.
	Error bool
}

type invocation struct {
	id, trace string
	event     []byte
	done      chan Result
}

// Function is one function's execution environment: its bootstrap process
// and its Runtime API. Like Lambda, it starts the process again (a new
// init) when it exited or an invocation ran past the timeout.
type Function struct {
	ln      net.Listener
	srv     *http.Server
	argv    []string
	dir     string
	env     []string
	started time.Time
	output  bytes.Buffer // the process's stdout and stderr

	ready   chan struct{} // closed at the first poll for an invocation
	readyAt time.Time
	next    chan *invocation

	mu        sync.Mutex
	proc      *process
	first     *process
	closed    bool
	pending   map[string]*invocation
	seq       int
	timeout   time.Duration
	stopAfter time.Duration // timeout × Config.Grace
	arn       string
}

// process is one run of the bootstrap.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // how it exited (once exited is closed)
}

// Config is what Lambda tells a function about itself.
type Config struct {
	Name     string        // AWS_LAMBDA_FUNCTION_NAME (default "local")
	ARN      string        // the invoked function ARN
	MemoryMB int           // AWS_LAMBDA_FUNCTION_MEMORY_SIZE (default 256)
	Timeout  time.Duration // each invocation's deadline (default 10 s)
	// Argv runs this command instead of the binary (an emulator and the
	// bootstrap: see Definition.Command); Dir is its working directory
	// (Lambda's is the code's folder).
	Argv []string
	Dir  string
	// Grace gives an invocation Grace times the timeout (at least 1): more
	// time for a slower machine or an emulator, which runs the same code
	// several times slower. The function is told that deadline
	// (Lambda-Runtime-Deadline-Ms), so its own calls are not cut short while
	// the invocation still has time, and it is stopped when it passes it.
	Grace float64
}

// Start runs the binary with env (added to a minimal Lambda-like
// environment) and serves its Runtime API on a loopback port.
func Start(bin string, env ...string) (*Function, error) {
	return StartConfig(bin, Config{}, env...)
}

// StartConfig is Start with the function's name, ARN, memory and timeout.
func StartConfig(bin string, c Config, env ...string) (*Function, error) {
	if c.Name == "" {
		c.Name = "local"
	}
	if c.ARN == "" {
		c.ARN = "arn:aws:lambda:us-east-1:000000000000:function:" + c.Name
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = 256
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	argv := c.Argv
	if len(argv) == 0 {
		argv = []string{bin}
	}
	f := &Function{ln: ln, ready: make(chan struct{}), next: make(chan *invocation), pending: map[string]*invocation{},
		timeout: c.Timeout, arn: c.ARN, argv: argv, dir: c.Dir, stopAfter: time.Duration(max(c.Grace, 1) * float64(c.Timeout))}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	f.env = append([]string{
		"AWS_LAMBDA_RUNTIME_API=" + ln.Addr().String(),
		"AWS_LAMBDA_FUNCTION_NAME=" + c.Name, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=" + strconv.Itoa(c.MemoryMB),
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
	}, env...)
	f.started = time.Now()
	p, err := f.start()
	if err != nil {
		_ = f.srv.Close()
		return nil, err
	}
	f.first = p
	return f, nil
}

// start runs the bootstrap (again): an init.
func (f *Function) start() (*process, error) {
	cmd := exec.Command(f.argv[0], f.argv[1:]...)
	cmd.Env, cmd.Dir = f.env, f.dir
	w := &syncWriter{w: &f.output, mu: &f.mu}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	f.mu.Lock()
	f.proc = p
	f.mu.Unlock()
	return p, nil
}

// current is the running process, started again when the last one exited
// (Lambda's next invocation after a crash or a timeout is a new init).
func (f *Function) current() (*process, error) {
	f.mu.Lock()
	p, closed := f.proc, f.closed
	f.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("lambdaruntime: the function is closed")
	}
	select {
	case <-p.exited:
		return f.start()
	default:
		return p, nil
	}
}

// Reinit starts the bootstrap again when its process exited during init,
// as Lambda's next invocation does after a failed init.
func (f *Function) Reinit() error {
	_, err := f.current()
	return err
}

// Ready waits for the function's first poll for work and returns the time
// from process start to then: what Lambda reports as Init Duration.
func (f *Function) Ready(ctx context.Context) (time.Duration, error) {
	f.mu.Lock()
	p := f.proc
	f.mu.Unlock()
	select {
	case <-f.ready:
		return f.readyAt.Sub(f.started), nil
	case <-p.exited:
		return 0, fmt.Errorf("lambdaruntime: the function exited during init (%v):\n%s", p.err, f.Output())
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Invoke hands the function one event, with a Lambda trace header when
// trace is not empty, and waits for its answer. An invocation that runs past
// the timeout is answered as Lambda answers it (an error, "Task timed out
// after N seconds") and its process is stopped: the next invocation starts
// the function again, as a new init.
func (f *Function) Invoke(ctx context.Context, event []byte, trace string) (Result, error) {
	p, err := f.current()
	if err != nil {
		return Result{}, err
	}
	f.mu.Lock()
	f.seq++
	inv := &invocation{id: "req-" + strconv.Itoa(f.seq), trace: trace, event: event, done: make(chan Result, 1)}
	f.pending[inv.id] = inv
	f.mu.Unlock()
	select {
	case f.next <- inv:
	case <-p.exited:
		return Result{}, fmt.Errorf("lambdaruntime: the function exited:\n%s", f.Output())
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	deadline := time.NewTimer(f.stopAfter)
	defer deadline.Stop()
	select {
	case r := <-inv.done:
		return r, nil
	case <-p.exited:
		return Result{}, fmt.Errorf("lambdaruntime: the function exited during an invocation:\n%s", f.Output())
	case <-deadline.C:
		f.mu.Lock()
		delete(f.pending, inv.id)
		f.mu.Unlock()
		_ = p.cmd.Process.Kill()
		<-p.exited
		body, _ := json.Marshal(map[string]string{"errorType": "Sandbox.Timedout",
			"errorMessage": fmt.Sprintf("%s Task timed out after %.2f seconds", inv.id, f.timeout.Seconds())})
		return Result{Body: body, Error: true}, nil
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// Output is everything the process printed so far.
func (f *Function) Output() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.output.String()
}

// Close stops the process and the Runtime API.
func (f *Function) Close() {
	f.mu.Lock()
	p := f.proc
	f.closed = true
	f.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.exited
	_ = f.srv.Close()
}

func (f *Function) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, prefix)
	switch {
	case r.Method == http.MethodGet && path == "invocation/next":
		f.mu.Lock()
		if f.readyAt.IsZero() {
			f.readyAt = time.Now()
			close(f.ready)
		}
		f.mu.Unlock()
		var inv *invocation
		select {
		case inv = <-f.next:
		case <-r.Context().Done():
			return
		}
		h := w.Header()
		h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
		h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(f.stopAfter).UnixMilli(), 10))
		h.Set("Lambda-Runtime-Invoked-Function-Arn", f.arn)
		if inv.trace != "" {
			h.Set("Lambda-Runtime-Trace-Id", inv.trace)
		}
		_, _ = w.Write(inv.event)
	case r.Method == http.MethodPost && strings.HasPrefix(path, "invocation/"):
		id, kind, _ := strings.Cut(strings.TrimPrefix(path, "invocation/"), "/")
		body, err := io.ReadAll(r.Body)
		f.mu.Lock()
		inv := f.pending[id]
		delete(f.pending, id)
		f.mu.Unlock()
		if inv == nil || err != nil || (kind != "response" && kind != "error") {
			http.Error(w, "unknown invocation", http.StatusBadRequest)
			return
		}
		inv.done <- Result{Body: body, Error: kind == "error"}
		w.WriteHeader(http.StatusAccepted)
	case r.Method == http.MethodPost && path == "init/error":
		w.WriteHeader(http.StatusAccepted)
	default:
		http.NotFound(w, r)
	}
}

type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
