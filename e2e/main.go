// Command e2e runs ExactOnce as a synthesized template defines it (see
// e2e/deployed) and checks every route and outcome, the events of every
// transition, the sweeper, a poison record set aside, the mapping's
// on-failure destination, republish and the example subscriber, with every
// AWS call authorized against the calling function's role. Least privilege
// both ways: a denied call fails the suite, and so does a policy statement
// no call used unless e2e/unused.txt lists it with its reason.
//
//	go run ./e2e -template cdk.out/ExactOnce.template.json   # or: make e2e [TEMPLATE=path]
//
// It exits non-zero on any failure; its last line is the summary.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/exactonce/exactonce/e2e/deployed"
)

func main() {
	tpl := flag.String("template", "cdk.out/ExactOnce.template.json", "synthesized template")
	root := flag.String("root", ".", "the repository (functions/, .tools/)")
	unused := flag.String("unused", "e2e/unused.txt", "the reviewed list of policy statements no call is expected to use")
	verbose := flag.Bool("v", false, "print the stack's own logs (stream reader) to stderr")
	failFast := flag.Bool("failfast", false, "stop at the first failed check")
	bin := flag.String("bin", "", "a folder holding every function of this checkout, already built (lambdaruntime.BuildAll); default: build them into ROOT/dist/e2e")
	flag.Parse()
	os.Exit(run(*tpl, *root, *unused, *bin, *verbose, *failFast))
}

func run(tpl, root, unusedPath, bin string, verbose, failFast bool) int {
	start := time.Now()
	root, _ = filepath.Abs(root)
	s := newSuite()
	s.failFast = failFast
	log := slog.New(slog.DiscardHandler)
	if verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	d, err := deployed.Start(ctx, deployed.Options{Template: tpl, Root: root, BinDir: bin, Built: bin != "", Callers: callerARNs(), Log: log})
	if err != nil {
		fmt.Printf("FAIL start: %v\n", err)
		fmt.Printf("e2e: 0 checks, 1 failed (the stack did not start); 0 functions; 0 calls authorized, 0 denied; unused unknown\n")
		return 1
	}
	defer d.Close()
	fmt.Printf("stack up in %s: %d functions, %d routes, %d mappings, %d rules\n", time.Since(start).Round(time.Millisecond),
		len(d.Stack.Functions), len(d.Stack.Routes), len(d.Stack.Mappings), len(d.Stack.Rules))
	s.d, s.ctx = d, ctx
	s.runAll()

	// Every call allowed.
	st := d.Proxy.Stats()
	if failFast && s.failed > 0 {
		fmt.Printf("e2e: %d checks, %d failed (stopped at the first); %d functions; %d calls authorized, %d denied; unused not judged; %s\n",
			s.n, s.failed, len(d.Stack.Functions), st.Calls, len(st.Denied)+len(st.Unmodeled), time.Since(start).Round(100*time.Millisecond))
		return 1
	}
	s.check("iam: every AWS call allowed", func() error {
		if len(st.Denied)+len(st.Unmodeled) == 0 {
			return nil
		}
		return fmt.Errorf("%d denied, %d not authorizable:\n    %s", len(st.Denied), len(st.Unmodeled), strings.Join(append(st.Denied, st.Unmodeled...), "\n    "))
	})
	// Every statement used, or listed with its reason.
	listed, err := readUnused(filepath.Join(root, unusedPath))
	if err != nil {
		s.check("iam: reviewed list of unused statements", func() error { return err })
	}
	j := judgeUnused(d.Stack.Functions, st.Used, listed)
	unusedLines, nListed := j.Unused, j.Listed
	s.check("iam: every policy statement used by a call or listed in "+unusedPath, func() error {
		if len(unusedLines) == 0 {
			return nil
		}
		return fmt.Errorf("%d unused:\n    %s", len(unusedLines), strings.Join(unusedLines, "\n    "))
	})
	s.check("iam: "+unusedPath+" lists no statement of this template's functions that a call used or that is gone", func() error {
		if len(j.Stale) == 0 {
			return nil
		}
		return fmt.Errorf("listed but used or absent (remove them): %s", strings.Join(j.Stale, "; "))
	})
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
	fmt.Printf("e2e: %d checks, %d failed; %d functions; %d calls authorized, %d denied; %d statements unused (%d listed in %s); %s\n",
		s.n, s.failed, len(d.Stack.Functions), st.Calls, len(st.Denied)+len(st.Unmodeled), len(unusedLines), nListed, unusedPath,
		time.Since(start).Round(100*time.Millisecond))
	if s.failed > 0 {
		return 1
	}
	return 0
}

// statementKey names a statement in e2e/unused.txt: the function, then its
// actions, sorted, comma-separated ("publisher dynamodb:ListStreams").
func statementKey(function string, doc map[string]any) string {
	var acts []string
	switch a := doc["Action"].(type) {
	case string:
		acts = []string{a}
	case []any:
		for _, x := range a {
			acts = append(acts, fmt.Sprint(x))
		}
	}
	sort.Strings(acts)
	return function + " " + strings.Join(acts, ",")
}

// readUnused reads the reviewed list: "<function|*> <actions>: <reason>"
// per line, # comments; a line without a reason is an error.
func readUnused(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, reason, ok := strings.Cut(line, ": ")
		if !ok || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s:%d: want \"<function|*> <actions>: <reason>\"", path, i+1)
		}
		out[strings.TrimSpace(k)] = reason
	}
	return out, nil
}
