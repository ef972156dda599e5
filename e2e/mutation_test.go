//go:build e2e

package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/exactonce/exactonce/local/lambdaruntime"
)

// TestMutations changes the synthesized template in each of six ways the
// suite must catch, runs the suite on it (stopping at the first failure) and
// checks that it fails naming the cause. make e2e runs it with
// EXACTONCE_E2E_TEMPLATE set to the template it synthesized.
func TestMutations(t *testing.T) {
	path := os.Getenv("EXACTONCE_E2E_TEMPLATE")
	if path == "" {
		t.Fatal("EXACTONCE_E2E_TEMPLATE is not set: run make e2e")
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "e2e")
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the suite: %v\n%s", err, b)
	}
	// The functions once for every mutation (the same checkout).
	fns := t.TempDir()
	if err := lambdaruntime.BuildAll("..", fns, "./functions/..."); err != nil {
		t.Fatal(err)
	}
	slots := make(chan struct{}, 2) // two stacks at a time: the machine has 2 cores
	for _, m := range []struct {
		name   string
		mutate func(t *testing.T, res map[string]any)
		cause  *regexp.Regexp // the line the suite must print
	}{
		{"a DynamoDB action removed from the consume function's role", func(t *testing.T, res map[string]any) {
			changeStatements(t, res, "Consume", func(st map[string]any) bool {
				return removeAction(st, "dynamodb:UpdateItem")
			})
		}, regexp.MustCompile(`denied: consume: dynamodb:UpdateItem on \S+ ImplicitlyDenied`)},
		{"a LeadingKeys condition narrowed", func(t *testing.T, res map[string]any) {
			changeStatements(t, res, "Keyclaim", func(st map[string]any) bool {
				c, _ := st["Condition"].(map[string]any)
				fa, _ := c["ForAllValues:StringLike"].(map[string]any)
				if fa == nil {
					return false
				}
				fa["dynamodb:LeadingKeys"] = []any{"key#t#nobody#*"}
				return true
			})
		}, regexp.MustCompile(`denied: keyclaim: dynamodb:UpdateItem on \S+ ImplicitlyDenied \(context \{[^}]*"dynamodb:LeadingKeys":\["key#t#acme#`)},
		{"an environment variable removed from the create function", func(t *testing.T, res map[string]any) {
			_, fp := fnProps(t, res, "Create")
			vars := fp["Environment"].(map[string]any)["Variables"].(map[string]any)
			delete(vars, "TABLE_NAME")
		}, regexp.MustCompile(`(?s)FAIL start: function create \(\w+\) did not start: .{0,300}TABLE_NAME is not set`)},
		{"a route key changed", func(t *testing.T, res map[string]any) {
			for _, r := range res {
				p := props(r)
				if r.(map[string]any)["Type"] == "AWS::ApiGatewayV2::Route" && p["RouteKey"] == "POST /actions/{actionId}/consume" {
					p["RouteKey"] = "POST /actions/{actionId}/redeem"
					return
				}
			}
			t.Fatal("no consume route")
		}, regexp.MustCompile(`FAIL POST /actions/\{actionId\}/consume: .*status 404, want 200: \{"message":"Not Found"\}`)},
		{"the publisher's filter changed so consumed records no longer match", func(t *testing.T, res map[string]any) {
			fc := mapping(t, res)["FilterCriteria"].(map[string]any)
			for _, f := range fc["Filters"].([]any) {
				fm := f.(map[string]any)
				fm["Pattern"] = strings.ReplaceAll(fm["Pattern"].(string), `"userId"`, `"ownerId"`)
			}
		}, regexp.MustCompile(`FAIL events: .*no action\.consumed event for \S+ on the bus within`)},
		{"the on-failure destination removed", func(t *testing.T, res map[string]any) {
			delete(mapping(t, res), "DestinationConfig")
		}, regexp.MustCompile(`FAIL mapping \S+: records past MaximumRecordAge go to its on-failure destination: the mapping has no on-failure destination`)},
	} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			slots <- struct{}{}
			defer func() { <-slots }()
			var tpl map[string]any
			if err := json.Unmarshal(orig, &tpl); err != nil {
				t.Fatal(err)
			}
			m.mutate(t, tpl["Resources"].(map[string]any))
			b, _ := json.Marshal(tpl)
			mutated := filepath.Join(t.TempDir(), "ExactOnce.template.json")
			if err := os.WriteFile(mutated, b, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "-failfast", "-template", mutated, "-root", "..", "-unused", "e2e/unused.txt", "-bin", fns)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed on the mutated template (%v):\n%s", err, out)
			}
			line := m.cause.Find(out)
			if line == nil {
				t.Fatalf("the suite failed, but not naming the cause (want %s):\n%s", m.cause, out)
			}
			shown := firstLine(out, line)
			if strings.Contains(string(line), "\n") {
				shown = string(line)
			}
			t.Logf("suite printed: %s", shown)
		})
	}
}

// firstLine is the whole output line holding match.
func firstLine(out, match []byte) string {
	s := string(out)
	i := strings.Index(s, string(match))
	start := strings.LastIndex(s[:i], "\n") + 1
	end := strings.Index(s[i:], "\n")
	if end < 0 {
		return s[start:]
	}
	return s[start : i+end]
}

func props(r any) map[string]any {
	p, _ := r.(map[string]any)["Properties"].(map[string]any)
	return p
}

func fnProps(t *testing.T, res map[string]any, title string) (string, map[string]any) {
	t.Helper()
	for id, r := range res {
		md, _ := r.(map[string]any)["Metadata"].(map[string]any)
		if p, _ := md["aws:cdk:path"].(string); strings.HasSuffix(p, "/"+title+"/Function/Resource") {
			return id, props(r)
		}
	}
	t.Fatalf("no %s function", title)
	return "", nil
}

func changeStatements(t *testing.T, res map[string]any, title string, change func(map[string]any) bool) {
	t.Helper()
	_, fp := fnProps(t, res, title)
	role := fp["Role"].(map[string]any)["Fn::GetAtt"].([]any)[0].(string)
	changed := false
	for _, r := range res {
		if r.(map[string]any)["Type"] != "AWS::IAM::Policy" {
			continue
		}
		p := props(r)
		attached := false
		for _, ro := range p["Roles"].([]any) {
			attached = attached || ro.(map[string]any)["Ref"] == role
		}
		if !attached {
			continue
		}
		doc := p["PolicyDocument"].(map[string]any)
		var keep []any
		for _, st := range doc["Statement"].([]any) {
			sm := st.(map[string]any)
			if change(sm) {
				changed = true
			}
			if acts, ok := sm["Action"].([]any); !ok || len(acts) > 0 {
				keep = append(keep, sm)
			}
		}
		doc["Statement"] = keep
	}
	if !changed {
		t.Fatalf("no statement of %s's role changed", title)
	}
}

// removeAction takes action out of a statement (leaving an empty list when
// it was the only one: the caller drops such statements).
func removeAction(st map[string]any, action string) bool {
	switch a := st["Action"].(type) {
	case string:
		if a == action {
			st["Action"] = []any{}
			return true
		}
	case []any:
		var keep []any
		for _, x := range a {
			if x != action {
				keep = append(keep, x)
			}
		}
		if len(keep) < len(a) {
			st["Action"] = keep
			return true
		}
	}
	return false
}

func mapping(t *testing.T, res map[string]any) map[string]any {
	t.Helper()
	for _, r := range res {
		if r.(map[string]any)["Type"] == "AWS::Lambda::EventSourceMapping" {
			return props(r)
		}
	}
	t.Fatal("no event source mapping")
	return nil
}
