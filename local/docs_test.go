package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
)

// Docs are the markdown files whose shell examples TestDocsInOrder runs,
// in the order a reader takes them (a reader who follows the list keeps one
// `make run` going from the first page to the last): the README's tour
// first, as a reader who lands on the README runs it, then the HTTP API
// page's examples on the same server (their ids are not the tour's), then
// the pages after it. A page's figures must hold whichever pages ran before
// it: the operating page's republish counts what is in the table, so it
// runs on a make run of its own.
var Docs = []string{"README.md", "docs/http-api.md", "docs/events.md", "docs/operating.md"}

// TestDocsInOrder takes the docs as a reader does: it runs their shell
// examples in order, against one `make run` (the real local server and
// DynamoDB Local, started with make as a reader starts it), and compares
// each answer with what the text says it is.
//
// The conventions, for whoever writes docs:
//
//   - A ```sh block runs when it calls the local server (a localhost:PORT
//     URL outside a comment) or starts one (a `make run` line). Other
//     blocks (deploy, AWS) are not run.
//   - Each command that calls the server is followed by what it answers,
//     one or more comment lines starting with "# →":
//     "# → 201 {"state":"active"}": the status and fields of the JSON body
//     (each field given must be there with that value; fields not given
//     are not checked: times and ids change every run);
//     "# → Idempotent-Replayed: true": a header of the answer (curl -i;
//     "Retry-After: …" only says the header is there);
//     "# → /regexp/": what the command prints matches.
//     A command that calls the server with no "# →" line is an error here.
//   - A `make run` line with variables (`EXACTONCE_TENANTS='…'
//     EXACTONCE_ADDR=127.0.0.1:8081 make run`) starts a second server
//     beside the first, on its own address; the first keeps its data. A
//     line restarting a running server's address is refused: everything
//     the examples before it did would be gone for the examples after it.
//   - Commands stay portable: no GNU-only flags (`date -d`, `sed -r`, …);
//     blocks run under sh, not bash.
//
// The reader's terminal is checked too: every line the server prints is
// the banner, a request, an event, or a sweep that did something (no
// metric lines, no idle sweeps), and Ctrl-C ends `make run` with status 0.
func TestDocsInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts make run")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	servers := &servers{t: t, root: root, byPort: map[string]*localServer{}}
	defer servers.stopAll()
	for _, doc := range Docs {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range shellBlocks(doc, string(text)) {
			if !b.runs() {
				continue
			}
			runBlock(t, servers, b)
		}
	}
	if len(servers.byPort) == 0 {
		t.Fatal("no example ran: the docs lost their shell blocks, or this test its way of finding them")
	}
	for _, s := range servers.all {
		s.checkQuiet(t)
	}
}

// block is one fenced shell block.
type block struct {
	doc   string
	line  int // of the opening fence
	lines []string
}

var fence = regexp.MustCompile("^```(sh|shell|bash)\\s*$")

func shellBlocks(doc, text string) []block {
	var out []block
	var cur *block
	for i, l := range strings.Split(text, "\n") {
		switch {
		case cur == nil && fence.MatchString(l):
			cur = &block{doc: doc, line: i + 1}
		case cur != nil && strings.HasPrefix(l, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	return out
}

var (
	localURL   = regexp.MustCompile(`\blocalhost:(\d+)`)
	makeRun    = regexp.MustCompile(`^((?:[A-Z_]+=(?:'[^']*'|"[^"]*"|\S+)\s+)*)make run\s*$`)
	assignment = regexp.MustCompile(`([A-Z_]+)=('[^']*'|"[^"]*"|\S+)`)
	// GNU-only flags readers on macOS (BSD tools) do not have.
	gnuOnly = regexp.MustCompile(`\bdate\s+(-[a-zA-Z]*d\b|--date)|\bsed\s+(-[a-zA-Z]*r\b|-i\s)|\bgrep\s+-[a-zA-Z]*P|\breadlink\s+-f|\bstat\s+-c|\bbase64\s+-w|\bxargs\s+-r`)
)

// command is one logical command of a block and what the text says it answers.
type command struct {
	line   int // in the doc
	text   string
	expect []string // the "# →" lines, without the arrow
}

func (b block) commands() []command {
	var out []command
	for i := 0; i < len(b.lines); i++ {
		l := strings.TrimSpace(b.lines[i])
		if rest, ok := strings.CutPrefix(l, "# →"); ok {
			if len(out) > 0 {
				out[len(out)-1].expect = append(out[len(out)-1].expect, strings.TrimSpace(rest))
			}
			continue
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		c := command{line: b.line + 1 + i, text: b.lines[i]}
		for continues(b.lines[i]) && i+1 < len(b.lines) {
			i++
			c.text += "\n" + b.lines[i]
		}
		out = append(out, c)
	}
	return out
}

// continues reports whether a shell line goes on on the next one.
func continues(l string) bool {
	l = strings.TrimRight(l, " ")
	return strings.HasSuffix(l, `\`) || strings.HasSuffix(l, "|") || strings.HasSuffix(l, "&&") || strings.HasSuffix(l, "||")
}

func (b block) runs() bool {
	for _, c := range b.commands() {
		if localURL.MatchString(c.text) || makeRun.MatchString(strings.TrimSpace(c.text)) {
			return true
		}
	}
	return false
}

// runBlock runs a block's commands in one sh, each with its answer checked.
func runBlock(t *testing.T, servers *servers, b block) {
	t.Helper()
	var cmds []command
	for _, c := range b.commands() {
		where := fmt.Sprintf("%s:%d", b.doc, c.line)
		if m := makeRun.FindStringSubmatch(strings.TrimSpace(c.text)); m != nil {
			env := map[string]string{}
			for _, a := range assignment.FindAllStringSubmatch(m[1], -1) {
				env[a[1]] = strings.Trim(a[2], `'"`)
			}
			servers.start(where, env)
			continue
		}
		if gnuOnly.MatchString(c.text) {
			t.Errorf("%s: a GNU-only flag (readers on macOS have BSD tools): %s", where, c.text)
		}
		if localURL.MatchString(c.text) && len(c.expect) == 0 {
			t.Errorf("%s: calls the local server but says nothing of the answer (add a \"# →\" line): %s", where, c.text)
		}
		cmds = append(cmds, c)
	}
	if len(cmds) == 0 {
		return
	}
	var script strings.Builder
	script.WriteString("curl() { command curl -w '%{stderr}@@STATUS %{http_code}\\n' \"$@\"; }\n")
	for i, c := range cmds {
		text := localURL.ReplaceAllStringFunc(c.text, func(u string) string {
			port := strings.TrimPrefix(u, "localhost:")
			return "localhost:" + servers.get(fmt.Sprintf("%s:%d", b.doc, c.line), port).port
		})
		fmt.Fprintf(&script, "printf '\\n@@CMD %d\\n'; printf '\\n@@CMD %d\\n' >&2\n%s\necho \"@@RC $?\" >&2\n", i, i, text)
	}
	sh := exec.Command("sh", "-c", script.String())
	var stdout, stderr bytes.Buffer
	sh.Stdout, sh.Stderr = &stdout, &stderr
	if err := sh.Run(); err != nil {
		t.Fatalf("%s:%d: the block did not run: %v\n%s", b.doc, b.line, err, stderr.String())
	}
	outs := splitMarked(stdout.String(), len(cmds))
	errs := splitMarked(stderr.String(), len(cmds))
	for i, c := range cmds {
		where := fmt.Sprintf("%s:%d", b.doc, c.line)
		out, diag := outs[i], errs[i]
		var statuses []string
		rc := ""
		for _, l := range strings.Split(diag, "\n") {
			if s, ok := strings.CutPrefix(l, "@@STATUS "); ok {
				statuses = append(statuses, s)
			} else if s, ok := strings.CutPrefix(l, "@@RC "); ok {
				rc = s
			}
		}
		if rc != "0" {
			t.Errorf("%s: exit status %s: %s\n%s", where, rc, c.text, diag)
			continue
		}
		for _, e := range c.expect {
			if msg := check(e, out, statuses); msg != "" {
				t.Errorf("%s: %s\n  command: %s\n  says:    # → %s\n  answer:  %s", where, msg, c.text, e, strings.TrimSpace(out))
			}
		}
	}
}

// splitMarked cuts a run's output at its "@@CMD i" markers.
func splitMarked(s string, n int) []string {
	out := make([]string, n)
	for i := range n {
		start := strings.Index(s, fmt.Sprintf("\n@@CMD %d\n", i))
		if start < 0 {
			continue
		}
		start += len(fmt.Sprintf("\n@@CMD %d\n", i))
		end := strings.Index(s[start:], fmt.Sprintf("\n@@CMD %d\n", i+1))
		if end < 0 {
			end = len(s) - start
		}
		out[i] = s[start : start+end]
	}
	return out
}

var headerLine = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9-]*): (.*)$`)

// check compares one "# →" line with what a command printed; "" when it holds.
func check(expect, out string, statuses []string) string {
	head, body := "", out
	if strings.HasPrefix(strings.TrimLeft(out, "\n"), "HTTP/") { // curl -i
		out = strings.TrimLeft(out, "\n")
		if h, b, ok := strings.Cut(out, "\r\n\r\n"); ok {
			head, body = h, b
		}
	}
	if strings.HasPrefix(expect, "/") && strings.HasSuffix(expect, "/") && len(expect) > 1 {
		re, err := regexp.Compile(expect[1 : len(expect)-1])
		if err != nil {
			return "bad regexp: " + err.Error()
		}
		if !re.MatchString(strings.TrimSpace(body)) {
			return "the output does not match"
		}
		return ""
	}
	if m := headerLine.FindStringSubmatch(expect); m != nil && !strings.HasPrefix(expect, "{") {
		for _, l := range strings.Split(head, "\r\n") {
			if name, value, ok := strings.Cut(l, ":"); ok && strings.EqualFold(name, m[1]) && (m[2] == "…" || strings.TrimSpace(value) == m[2]) {
				return ""
			}
		}
		return "no header " + expect + " in the answer (curl -i shows headers)"
	}
	status, rest, _ := strings.Cut(expect, " ")
	if _, err := strconv.Atoi(status); err != nil || len(status) != 3 {
		return `a "# →" line is a status (and JSON), a header, or a /regexp/`
	}
	if len(statuses) == 0 || statuses[len(statuses)-1] != status {
		return fmt.Sprintf("status %v, the text says %s", statuses, status)
	}
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return ""
	}
	if strings.HasPrefix(rest, "/") && strings.HasSuffix(rest, "/") {
		return check(rest, out, statuses)
	}
	var want, got any
	if err := json.Unmarshal([]byte(rest), &want); err != nil {
		return "the text's JSON does not parse: " + err.Error()
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		return "the answer is not JSON: " + err.Error()
	}
	if path, ok := contains(got, want, "$"); !ok {
		return "the answer differs at " + path
	}
	return ""
}

// contains reports whether got has every field of want with its value
// (objects: the fields given; arrays: the same length, element by element).
func contains(got, want any, path string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path, false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return path + "." + k + " (missing)", false
			}
			if p, ok := contains(gv, wv, path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return path + " (length)", false
		}
		for i := range w {
			if p, ok := contains(g[i], w[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	default:
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		return path, bytes.Equal(a, b)
	}
}

// servers are the `make run`s of one doc run, by the port the docs use.
type servers struct {
	t      *testing.T
	root   string
	byPort map[string]*localServer // the docs' port → its server
	all    []*localServer
}

func (s *servers) get(where, docPort string) *localServer {
	if srv := s.byPort[docPort]; srv != nil {
		return srv
	}
	if docPort != "8080" {
		s.t.Fatalf("%s: localhost:%s is called, but no block started a make run on it", where, docPort)
	}
	return s.start(where, nil) // the plain make run the docs start with
}

func (s *servers) start(where string, env map[string]string) *localServer {
	docPort := "8080"
	if addr := env["EXACTONCE_ADDR"]; addr != "" {
		_, docPort, _ = strings.Cut(addr, ":")
	}
	if s.byPort[docPort] != nil {
		s.t.Fatalf("%s: restarts the make run on port %s: the examples after it would lose what the ones before it did (start another on its own EXACTONCE_ADDR)", where, docPort)
	}
	srv := startLocal(s.t, s.root, env)
	s.byPort[docPort] = srv
	s.all = append(s.all, srv)
	return srv
}

func (s *servers) stopAll() {
	for _, srv := range s.all {
		srv.stop(s.t)
	}
}

// localServer is one `make run`, in its own process group as a terminal
// runs it (Ctrl-C reaches make and the server).
type localServer struct {
	cmd     *exec.Cmd
	port    string
	out     testkit.SyncBuffer // what make run printed, stdout and stderr
	done    chan struct{}
	stopped bool
}

func (l *localServer) output() string { return l.out.String() }

var bannerURL = regexp.MustCompile(`ExactOnce local: http://127\.0\.0\.1:(\d+)`)

func startLocal(t *testing.T, root string, env map[string]string) *localServer {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "run")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "EXACTONCE_ADDR=127.0.0.1:0", "EXACTONCE_SWEEP_INTERVAL=100ms")
	for k, v := range env {
		if k != "EXACTONCE_ADDR" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	l := &localServer{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &l.out, &l.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(l.done) }()
	// A test that fails before its stopAll leaves no make run behind.
	t.Cleanup(func() { l.stop(t) })
	deadline := time.Now().Add(4 * time.Minute) // a first build on a loaded machine
	// The banner is printed a line at a time: its try: line, the last, may
	// come well after the URL on a loaded machine.
	l.port = l.await(t, bannerURL, deadline, "its URL")[1]
	try := l.await(t, tryLine, deadline, "a try: line")
	// The banner's first request works in the server's mode (with tenants
	// on, it names a caller the map places). Not sent to the plain server:
	// the docs' figures count what is in its table.
	if len(env) == 0 {
		return l
	}
	out, err := exec.Command("sh", "-c", "curl() { command curl -w '\n@@STATUS %{http_code}' \"$@\"; }\n"+try[1]).Output()
	if err != nil || !strings.HasSuffix(string(out), "@@STATUS 201") {
		t.Errorf("the banner's try line (env %v) answered %v %s, want 201", env, err, out)
	}
	return l
}

var tryLine = regexp.MustCompile(`(?m)^  try: (curl .*)\n`)

// await polls what make run printed until re matches (returning its
// submatches), failing the test when make run ends or deadline passes first.
func (l *localServer) await(t *testing.T, re *regexp.Regexp, deadline time.Time, what string) []string {
	t.Helper()
	for {
		if m := re.FindStringSubmatch(l.output()); m != nil {
			return m
		}
		select {
		case <-l.done:
			t.Fatalf("make run ended before it printed %s: %s", what, l.output())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			l.stop(t)
			t.Fatalf("make run did not print %s: %s", what, l.output())
		}
	}
}

// stop is Ctrl-C: SIGINT to the process group; make must end with status 0.
func (l *localServer) stop(t *testing.T) {
	if l.stopped {
		return
	}
	l.stopped = true
	_ = syscall.Kill(-l.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-l.done:
	case <-time.After(time.Minute):
		_ = syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
		<-l.done
		t.Errorf("make run did not end within a minute of Ctrl-C")
		return
	}
	// make ends as a terminal's Ctrl-C ends any program (killed by the
	// SIGINT it got too, or status 0), after the server shut down cleanly,
	// and says nothing about an error.
	ws, _ := l.cmd.ProcessState.Sys().(syscall.WaitStatus)
	clean := ws.Exited() && ws.ExitStatus() == 0 || ws.Signaled() && ws.Signal() == syscall.SIGINT
	if out := l.output(); !clean || strings.Contains(out, "make: ***") || !strings.Contains(out, `"msg":"shutting down"`) {
		t.Errorf("Ctrl-C on make run: %v\n%s", l.cmd.ProcessState, tail(out))
	}
	if _, after, ok := strings.Cut(l.output(), `"msg":"shutting down"`); ok {
		for _, line := range strings.Split(after, "\n")[1:] {
			if strings.TrimSpace(line) != "" {
				t.Errorf("printed after Ctrl-C: %s", line)
			}
		}
	}
}

// checkQuiet: what the server printed is one line per request, event or
// sweep that did something, and nothing while it idles (ten sweeps).
func (l *localServer) checkQuiet(t *testing.T) {
	t.Helper()
	sweeps := func() int {
		resp, err := http.Get("http://127.0.0.1:" + l.port + "/_local/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var totals []struct {
			Metric string
			Count  int
		}
		if err := json.NewDecoder(resp.Body).Decode(&totals); err != nil {
			t.Fatal(err)
		}
		for _, x := range totals {
			if x.Metric == "SweepDuration" {
				return x.Count
			}
		}
		return 0
	}
	before, printed := sweeps(), l.output()
	for deadline := time.Now().Add(2 * time.Minute); sweeps() < before+10; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sweeper did not run 10 times in 2 minutes")
		}
	}
	// An event of an earlier request may still arrive (the stream is read
	// every 100 ms, later on a loaded machine): one line per event is what
	// the docs promise. Anything else printed while idle is noise.
	if now := l.output(); now != printed {
		for _, line := range strings.Split(strings.TrimSpace(now[len(printed):]), "\n") {
			if !strings.HasPrefix(line, `{"msg":"event",`) {
				t.Errorf("an idle make run printed:\n%s", line)
			}
		}
		printed = now
	}
	sc := bufio.NewScanner(strings.NewReader(printed))
	for sc.Scan() {
		line := sc.Text()
		var rec map[string]any
		switch {
		case !strings.HasPrefix(line, "{"): // the banner, make's own lines
		case json.Unmarshal([]byte(line), &rec) != nil:
			t.Errorf("not JSON: %s", line)
		case rec["_aws"] != nil:
			t.Errorf("a metrics line (EXACTONCE_PRINT_METRICS is not set): %.120s…", line)
		case rec["msg"] == "sweep" && rec["due"] == 0.0:
			t.Errorf("an idle sweep was printed: %s", line)
		}
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}
