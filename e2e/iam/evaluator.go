// Package iam authorizes the local stack's AWS calls as IAM would: a proxy
// in front of DynamoDB Local, the local bus, queue and Secrets Manager knows
// the caller from the access key of its SigV4 signature, maps the call to
// its action, resource ARNs and condition keys, and has the caller's role
// policies from the template evaluated by @cloud-copilot/iam-simulate (a
// maintained IAM evaluator, run as one long-lived node process). A call the
// policies do not allow is answered AccessDeniedException, as AWS does.
package iam

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sync"
)

// Policy is one named policy document (the proxy names one per statement,
// so a decision says which statements made it).
type Policy struct {
	Name   string `json:"name"`
	Policy any    `json:"policy"`
}

// Request is one authorization question.
type Request struct {
	ID               int            `json:"id"`
	IdentityPolicies []Policy       `json:"identityPolicies"`
	ResourcePolicy   any            `json:"resourcePolicy,omitempty"`
	Action           string         `json:"action"`
	Principal        string         `json:"principal"`
	Account          string         `json:"account"`
	Resource         string         `json:"resource"`
	Context          map[string]any `json:"context"`
}

// Decision is the evaluator's answer.
type Decision struct {
	ID     int      `json:"id"`
	Result string   `json:"result"` // Allowed, ImplicitlyDenied or ExplicitlyDenied
	Allow  []string `json:"allow"`  // policies whose statement allowed the call
	Deny   []string `json:"deny"`   // policies whose statement denied it
	Error  string   `json:"error"`
}

// Evaluator is the node process.
type Evaluator struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	mu      sync.Mutex
	seq     int
	pending map[int]chan Decision
	dead    chan struct{}
	stderr  *lockedBuf
}

// StartEvaluator runs node on toolsDir/iamsim.mjs (toolsDir is the .tools
// folder holding the pinned @cloud-copilot/iam-simulate).
func StartEvaluator(toolsDir string) (*Evaluator, error) {
	cmd := exec.Command("node", filepath.Join(toolsDir, "iamsim.mjs"))
	cmd.Dir = toolsDir
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	e := &Evaluator{cmd: cmd, in: in, pending: map[int]chan Decision{}, dead: make(chan struct{}), stderr: &lockedBuf{}}
	cmd.Stderr = e.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("iam: start the evaluator (node): %w", err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var d Decision
			if json.Unmarshal(sc.Bytes(), &d) != nil {
				continue
			}
			e.mu.Lock()
			ch := e.pending[d.ID]
			delete(e.pending, d.ID)
			e.mu.Unlock()
			if ch != nil {
				ch <- d
			}
		}
		close(e.dead)
	}()
	return e, nil
}

// Evaluate asks one question.
func (e *Evaluator) Evaluate(r Request) (Decision, error) {
	ch := make(chan Decision, 1)
	e.mu.Lock()
	e.seq++
	r.ID = e.seq
	e.pending[r.ID] = ch
	b, err := json.Marshal(r)
	if err == nil {
		_, err = e.in.Write(append(b, '\n'))
	}
	e.mu.Unlock()
	if err != nil {
		return Decision{}, fmt.Errorf("iam: evaluator: %w", err)
	}
	select {
	case d := <-ch:
		if d.Error != "" {
			return d, fmt.Errorf("iam: evaluator refused %s on %s: %s", r.Action, r.Resource, d.Error)
		}
		return d, nil
	case <-e.dead:
		return Decision{}, fmt.Errorf("iam: the evaluator stopped: %s", e.stderr.String())
	}
}

// Close stops the process.
func (e *Evaluator) Close() {
	_ = e.in.Close()
	<-e.dead
	_ = e.cmd.Wait()
}

type lockedBuf struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
