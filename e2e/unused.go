// Package e2e runs ExactOnce as a synthesized template defines it (see
// e2e/emulator) under go test: make e2e, or
//
//	EXACTONCE_E2E_TEMPLATE=$PWD/cdk.out/ExactOnce.template.json go test -tags e2e -run TestStack -v ./e2e
//
// This file judges the policy statements no call used against the
// reviewed list (e2e/unused.txt).
package e2e

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/exactonce/exactonce/e2e/template"
)

// unusedJudgment is what the suite concludes about the statements no call
// used, against the reviewed list (e2e/unused.txt).
type unusedJudgment struct {
	// Unused: statements no call used and the list does not name.
	Unused []string
	// Listed: unused statements the list names (so they pass), and entries
	// whose actions a used statement holds but no call used.
	Listed int
	// Stale: entries of the list for a function of this template (or "*")
	// whose statement is gone or was used: they must be removed.
	Stale []string
	// Absent: entries for a function this template does not have (the
	// example subscriber's, on a template synthesized without it): not
	// judged here, since another template has them.
	Absent []string
}

// judgeUnused compares the statements of the template's functions no call
// used (used: statement id → calls it allowed) with the reviewed list
// (listed: statementKey → reason). An entry whose actions are held by a
// statement other calls used (one template grants them alone, another
// with other actions) still stands while no call used those actions
// (calls: "function action" → calls).
func judgeUnused(functions map[string]*template.Function, used, calls map[string]int, listed map[string]string) unusedJudgment {
	var j unusedJudgment
	stale := map[string]bool{}
	for k := range listed {
		stale[k] = true
	}
	names := make([]string, 0, len(functions))
	for n := range functions {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, stmt := range functions[n].Statements {
			if used[stmt.ID] > 0 {
				continue
			}
			k := statementKey(n, stmt.Doc)
			if _, ok := listed[k]; ok {
				j.Listed++
				delete(stale, k)
				continue
			}
			if _, ok := listed[statementKey("*", stmt.Doc)]; ok {
				j.Listed++
				delete(stale, statementKey("*", stmt.Doc))
				continue
			}
			j.Unused = append(j.Unused, fmt.Sprintf("%s (%s): no call used it", k, stmt.ID))
		}
	}
	for k := range stale {
		function, acts, _ := strings.Cut(k, " ")
		if heldUncalled(functions, function, strings.Split(acts, ","), calls) {
			j.Listed++
			continue
		}
		if _, ok := functions[function]; function != "*" && !ok {
			j.Absent = append(j.Absent, k)
			continue
		}
		j.Stale = append(j.Stale, k)
	}
	sort.Strings(j.Stale)
	sort.Strings(j.Absent)
	return j
}

// heldUncalled reports whether function (any, for "*") has a statement
// allowing every one of actions, none of which a call of it used.
func heldUncalled(functions map[string]*template.Function, function string, actions []string, calls map[string]int) bool {
	for name, f := range functions {
		if function != "*" && name != function {
			continue
		}
		for _, st := range f.Statements {
			_, have, _ := strings.Cut(statementKey(name, st.Doc), " ")
			held := strings.Split(have, ",")
			if !all(actions, func(a string) bool { return slices.Contains(held, a) && calls[name+" "+a] == 0 }) {
				continue
			}
			return true
		}
	}
	return false
}

func all(xs []string, ok func(string) bool) bool {
	for _, x := range xs {
		if !ok(x) {
			return false
		}
	}
	return true
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
