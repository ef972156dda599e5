//go:build e2e

package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMutations changes the synthesized template in each of the ways below
// that the suite must catch (a lost permission, a broken route, filter or
// destination, and what Lambda itself would refuse to run: another
// function's code, the wrong architecture, a managed runtime), runs the
// suite (TestStack) on it, stopping at the first failure, and checks that
// it fails naming the cause; and a replica Region's template in two more
// (its custom resource's DescribeTable not allowed, a secret name the first
// Region does not replicate there). make e2e runs it with
// EXACTONCE_E2E_TEMPLATE and EXACTONCE_E2E_REPLICA_TEMPLATE set to the
// templates it synthesized (in their cloud assemblies, whose assets and
// other stacks the mutated templates share).
func TestMutations(t *testing.T) {
	paths := map[bool]string{false: os.Getenv("EXACTONCE_E2E_TEMPLATE"), true: os.Getenv("EXACTONCE_E2E_REPLICA_TEMPLATE")}
	if paths[false] == "" || paths[true] == "" {
		t.Fatal("EXACTONCE_E2E_TEMPLATE or EXACTONCE_E2E_REPLICA_TEMPLATE is not set: run make e2e")
	}
	origs := map[bool][]byte{}
	for replica, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		origs[replica] = b
	}
	bin := filepath.Join(t.TempDir(), "e2e.test")
	if b, err := exec.Command("go", "test", "-c", "-tags", "e2e", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the suite: %v\n%s", err, b)
	}
	slots := make(chan struct{}, 2) // two stacks at a time: the machine has 2 cores
	type mutation struct {
		name    string
		mutate  func(t *testing.T, res map[string]any)
		cause   *regexp.Regexp // the line the suite must print
		replica bool           // a mutation of the replica Region's template
	}
	for _, m := range []mutation{
		{"a DynamoDB action removed from the consume function's role", func(t *testing.T, res map[string]any) {
			changeStatements(t, res, "Consume", func(st map[string]any) bool {
				return removeAction(st, "dynamodb:UpdateItem")
			})
		}, regexp.MustCompile(`denied: consume: dynamodb:UpdateItem on \S+ ImplicitlyDenied`), false},
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
		}, regexp.MustCompile(`denied: keyclaim: dynamodb:UpdateItem on \S+ ImplicitlyDenied \(context \{[^}]*"dynamodb:LeadingKeys":\["key#t#acme#`), false},
		{"an environment variable removed from the create function", func(t *testing.T, res map[string]any) {
			_, fp := fnProps(t, res, "Create")
			vars := fp["Environment"].(map[string]any)["Variables"].(map[string]any)
			delete(vars, "TABLE_NAME")
		}, regexp.MustCompile(`(?s)FAIL start: function create \(\w+\) did not start: .{0,300}TABLE_NAME is not set`), false},
		{"a route key changed", func(t *testing.T, res map[string]any) {
			for _, r := range res {
				p := props(r)
				if r.(map[string]any)["Type"] == "AWS::ApiGatewayV2::Route" && p["RouteKey"] == "POST /actions/{actionId}/consume" {
					p["RouteKey"] = "POST /actions/{actionId}/redeem"
					return
				}
			}
			t.Fatal("no consume route")
		}, regexp.MustCompile(`FAIL POST /actions/\{actionId\}/consume: .*status 404, want 200: \{"message":"Not Found"\}`), false},
		{"the publisher's filter changed so consumed records no longer match", func(t *testing.T, res map[string]any) {
			fc := mapping(t, res)["FilterCriteria"].(map[string]any)
			for _, f := range fc["Filters"].([]any) {
				fm := f.(map[string]any)
				fm["Pattern"] = strings.ReplaceAll(fm["Pattern"].(string), `"userId"`, `"ownerId"`)
			}
		}, regexp.MustCompile(`FAIL events: .*no action\.consumed event for \S+ on the bus within`), false},
		{"the on-failure destination removed", func(t *testing.T, res map[string]any) {
			delete(mapping(t, res), "DestinationConfig")
		}, regexp.MustCompile(`FAIL mapping \S+: records past MaximumRecordAge go to its on-failure destination: the mapping has no on-failure destination`), false},
		{"the create function's Code swapped with the get function's", func(t *testing.T, res map[string]any) {
			_, create := fnProps(t, res, "Create")
			_, get := fnProps(t, res, "Get")
			create["Code"], get["Code"] = get["Code"], create["Code"]
		}, regexp.MustCompile(`FAIL start: function create \(\w+\) runs asset\.\w+, whose bootstrap is functions/get, not functions/create: its Code is another function's`), false},
		{"the consume function's Architectures set to x86_64", func(t *testing.T, res map[string]any) {
			_, fp := fnProps(t, res, "Consume")
			fp["Architectures"] = []any{"x86_64"}
		}, regexp.MustCompile(`FAIL start: function Consume\w+: every invocation fails Runtime\.InvalidEntrypoint: fork/exec /var/task/bootstrap: exec format error \(the bootstrap is an arm64 executable; the function's Architectures is x86_64\)`), false},
		{"the get function on a managed runtime with a handler name", func(t *testing.T, res map[string]any) {
			_, fp := fnProps(t, res, "Get")
			fp["Runtime"], fp["Handler"] = "nodejs22.x", "index.handler"
		}, regexp.MustCompile(`FAIL start: function Get\w+: every invocation fails Runtime\.ImportModuleError: Runtime nodejs22\.x loads Handler "index\.handler" from index\.js or index\.mjs or index\.cjs, which the code does not have`), false},
		{"replica Region: the stream custom resource's role without dynamodb:DescribeTable", func(t *testing.T, res map[string]any) {
			changeProviderStatements(t, res, func(st map[string]any) bool { return removeAction(st, "dynamodb:DescribeTable") })
		}, regexp.MustCompile(`FAIL start: custom resource ReplicaStream\w+ \(Custom::AWS, provider \w+\): DynamoDB\.describeTable .* AccessDeniedException: User: \S+ is not authorized to perform: dynamodb:DescribeTable on resource: arn:aws:dynamodb:us-east-2:\d+:table/ExactOnce-actions`), true},
		{"replica Region: its functions and policies name a secret the first Region does not replicate there", func(t *testing.T, res map[string]any) {
			renameEverywhere(t, res, "ExactOnce-actions/server", "ExactOnce-actions/srv")
		}, regexp.MustCompile(`(?s)FAIL start: function \w+ \(\w+\) did not start: .{0,400}read secret ExactOnce-actions/srv: .{0,300}(AccessDeniedException|ResourceNotFoundException)`), true},
	} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			slots <- struct{}{}
			defer func() { <-slots }()
			path := paths[m.replica]
			var tpl map[string]any
			if err := json.Unmarshal(origs[m.replica], &tpl); err != nil {
				t.Fatal(err)
			}
			m.mutate(t, tpl["Resources"].(map[string]any))
			b, _ := json.Marshal(tpl)
			dir := t.TempDir()
			mutated := filepath.Join(dir, filepath.Base(path))
			if err := os.WriteFile(mutated, b, 0o644); err != nil {
				t.Fatal(err)
			}
			linkAssembly(t, path, dir)
			cmd := exec.Command(bin, "-test.run", "^TestStack$", "-test.failfast", "-test.v", "-test.count=1", "-test.timeout=14m")
			cmd.Env = append(os.Environ(), "EXACTONCE_E2E_TEMPLATE="+mutated)
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

// linkAssembly links every file of the cloud assembly of template but
// template itself into dir, so a mutated template there runs the
// assembly's assets, after its other stacks.
func linkAssembly(t *testing.T, template, dir string) {
	t.Helper()
	assembly := filepath.Dir(template)
	entries, err := os.ReadDir(assembly)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == filepath.Base(template) {
			continue
		}
		if err := os.Symlink(filepath.Join(assembly, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
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
	if !changeRoleStatements(res, role, change) {
		t.Fatalf("no statement of %s's role changed", title)
	}
}

// changeRoleStatements changes the statements of the policies attached to
// role, dropping those left without an action; it reports whether change
// changed any.
func changeRoleStatements(res map[string]any, role string, change func(map[string]any) bool) bool {
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
	return changed
}

// changeProviderStatements changes the statements of the role of the
// custom resources' provider (the replica stream's DescribeTable).
func changeProviderStatements(t *testing.T, res map[string]any, change func(map[string]any) bool) {
	t.Helper()
	var role string
	for _, r := range res {
		if r.(map[string]any)["Type"] != "Custom::AWS" {
			continue
		}
		fn, _ := props(r)["ServiceToken"].(map[string]any)["Fn::GetAtt"].([]any)
		role = props(res[fn[0].(string)])["Role"].(map[string]any)["Fn::GetAtt"].([]any)[0].(string)
	}
	if role == "" || !changeRoleStatements(res, role, change) {
		t.Fatal("no statement of a custom resource provider's role changed")
	}
}

// renameEverywhere replaces old with new in every string of the resources.
func renameEverywhere(t *testing.T, res map[string]any, old, new string) {
	t.Helper()
	n := 0
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		case string:
			if strings.Contains(x, old) {
				n++
				return strings.ReplaceAll(x, old, new)
			}
		}
		return v
	}
	walk(res)
	if n == 0 {
		t.Fatalf("no %q in the template", old)
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
