//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exactonce/exactonce/e2e/emulator"
	"github.com/exactonce/exactonce/e2e/template"
)

// TestStack runs the stack the template at $EXACTONCE_E2E_TEMPLATE defines
// (in its cloud assembly: the functions run from its assets) and checks
// every route and outcome, the events of every transition, the sweeper, a
// poison record and a rejected event set aside, the mapping's on-failure
// destination, republish and the example subscriber, with every AWS call
// authorized against the calling function's role. Least privilege both
// ways: a denied call fails it, and so does a policy statement no call used
// unless e2e/unused.txt lists it with its reason. Each check is a subtest
// (-run 'TestStack/keys' runs one, with the steps it needs); the judgments
// of the whole run (every route called, every statement used) run only
// when every check did. A check that does not apply to the template (a
// TTL deletion on a table without TTL, the purge on one with it) prints
// why instead ("n/a"), counted in the summary. A stack with an environment
// (a multi-Region deployment's replica Region) runs in its Region after
// what the stacks it depends on create there (e2e/emulator). Its last
// line is the summary.
func TestStack(t *testing.T) {
	tpl := os.Getenv("EXACTONCE_E2E_TEMPLATE")
	if tpl == "" {
		t.Fatal("EXACTONCE_E2E_TEMPLATE is not set: run make e2e (or set it to a synthesized template in its cdk.out)")
	}
	start := time.Now()
	root, _ := filepath.Abs("..")
	const unusedPath = "e2e/unused.txt"
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("EXACTONCE_E2E_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	d, err := emulator.Start(ctx, emulator.Options{Template: tpl, Root: root, Callers: callerARNs(), Log: log})
	if err != nil {
		fmt.Printf("FAIL start: %v\n", err)
		fmt.Printf("e2e: 0 checks, 1 failed (the stack did not start); 0 functions; 0 calls authorized, 0 denied; unused unknown\n")
		t.Fatalf("the stack did not start: %v", err)
	}
	defer d.Close()
	fmt.Printf("stack up in %s: %d functions, %d routes, %d mappings, %d rules, %d custom resources; in %s\n", time.Since(start).Round(time.Millisecond),
		len(d.Stack.Functions), len(d.Stack.Routes), len(d.Stack.Mappings), len(d.Stack.Rules), len(d.Stack.CustomResources), d.Region)
	s := newSuite(t)
	s.d, s.ctx = d, ctx
	s.runAll()

	st := d.Proxy.Stats()
	if failFast() && s.failed > 0 {
		fmt.Printf("e2e: %d checks, %d failed (stopped at the first); %d functions; %d calls authorized, %d denied; unused not judged; %s\n",
			s.n, s.failed, len(d.Stack.Functions), st.Calls, len(st.Denied)+len(st.Unmodeled), time.Since(start).Round(100*time.Millisecond))
		return
	}
	s.check("iam: every AWS call allowed", func() error {
		if len(st.Denied)+len(st.Unmodeled) == 0 {
			return nil
		}
		return fmt.Errorf("%d denied, %d not authorizable:\n    %s", len(st.Denied), len(st.Unmodeled), strings.Join(append(st.Denied, st.Unmodeled...), "\n    "))
	})
	whole := s.ran == s.declared // -run chose every check
	listed, err := readUnused(filepath.Join(root, unusedPath))
	if err != nil {
		s.check("iam: reviewed list of unused statements", func() error { return err })
	}
	judged := daemonUse(d, st.Used)
	for id, p := range d.Stack.Providers { // custom resources' providers: least privilege too
		judged[id] = p
	}
	j := judgeUnused(judged, st.Used, st.Actions, listed)
	if whole {
		s.check("iam: every policy statement used by a call or listed in "+unusedPath, func() error {
			if len(j.Unused) == 0 {
				return nil
			}
			return fmt.Errorf("%d unused:\n    %s", len(j.Unused), strings.Join(j.Unused, "\n    "))
		})
		s.check("iam: "+unusedPath+" lists no statement of this template's functions that a call used or that is gone", func() error {
			if len(j.Stale) == 0 {
				return nil
			}
			return fmt.Errorf("listed but used or absent (remove them): %s", strings.Join(j.Stale, "; "))
		})
		s.routesCalled()
	}
	s.check("stack: no failure in the mappings or rule deliveries", func() error {
		if f := d.Failures(); len(f) > 0 {
			return fmt.Errorf("%s", strings.Join(f, "\n    "))
		}
		return nil
	})
	if len(j.Absent) > 0 {
		fmt.Printf("note: %s lists statements of functions this template does not have (not judged here): %s\n",
			unusedPath, strings.Join(j.Absent, "; "))
	}
	unused := fmt.Sprintf("%d statements unused (%d listed in %s)", len(j.Unused), j.Listed, unusedPath)
	if !whole {
		unused = "unused and route coverage not judged (-run chose part of the suite)"
	}
	na := ""
	if len(s.na) > 0 {
		na = fmt.Sprintf(", %d not applicable to this template", len(s.na))
	}
	fmt.Printf("e2e: %d checks, %d failed%s; %d functions; %d calls authorized, %d denied; %s; %s\n",
		s.n, s.failed, na, len(d.Stack.Functions), st.Calls, len(st.Denied)+len(st.Unmodeled), unused,
		time.Since(start).Round(100*time.Millisecond))
}

func failFast() bool {
	f := flag.Lookup("test.failfast")
	return f != nil && f.Value.String() == "true"
}

// daemonUse is the template's functions with what the X-Ray daemon Lambda
// runs beside a traced function did with its role: once the function's
// segments reached it, its xray: actions are used (a statement of nothing
// else counts as used; in another statement they are left out of its key).
// No call of a function's code goes through the proxy for them.
func daemonUse(d *emulator.Deployment, used map[string]int) map[string]*template.Function {
	out := map[string]*template.Function{}
	for name, f := range d.Stack.Functions {
		if d.TraceSegments(name) <= 0 {
			out[name] = f
			continue
		}
		g := *f
		g.Statements = nil
		for _, st := range f.Statements {
			var acts, kept []any
			switch a := st.Doc["Action"].(type) {
			case string:
				acts = []any{a}
			case []any:
				acts = a
			}
			for _, a := range acts {
				if s, _ := a.(string); !strings.HasPrefix(s, "xray:") {
					kept = append(kept, a)
				}
			}
			switch {
			case len(kept) == 0:
				used[st.ID]++
			case len(kept) < len(acts):
				doc := map[string]any{}
				for k, v := range st.Doc {
					doc[k] = v
				}
				doc["Action"] = kept
				st = template.Statement{ID: st.ID, Doc: doc}
			}
			g.Statements = append(g.Statements, st)
		}
		out[name] = &g
	}
	return out
}
