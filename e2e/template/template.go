// Package template reads a synthesized CloudFormation template (cdk.out's
// ExactOnce.template.json) and resolves its intrinsic functions (Ref,
// Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select, Fn::Split and the pseudo
// parameters) to the names and ARNs of a local stack, so the end-to-end
// suite runs what the template defines.
package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Local account of the stack the suite runs, and its Region when the
// template is environment-agnostic (a stack with an environment runs in its
// own Region: Template.Region).
const (
	DefaultRegion = "us-east-1"
	Account       = "000000000000"
	Partition     = "aws"
)

// Template is a CloudFormation template's resources.
type Template struct {
	Resources map[string]Resource `json:"Resources"`
	// Path is the file it was read from ("" when parsed from bytes).
	Path string `json:"-"`
	// Stack is its stack's artifact id in the cloud assembly ("" without
	// one), Region the Region the assembly gives it (DefaultRegion when the
	// stack is environment-agnostic).
	Stack  string `json:"-"`
	Region string `json:"-"`
	// Dependencies are the templates of the stacks cdk deploy deploys
	// before this one (a replica Region's stack depends on the first
	// Region's, which creates the global table and the secret).
	Dependencies []*Template `json:"-"`
}

// Resource is one resource of a template.
type Resource struct {
	Type       string         `json:"Type"`
	Properties map[string]any `json:"Properties"`
	Metadata   map[string]any `json:"Metadata"`
}

// Load reads a template file and, from the cloud assembly's manifest.json
// beside it when there is one, its stack's Region and the templates of the
// stacks it depends on.
func Load(path string) (*Template, error) {
	return load(path, map[string]bool{})
}

func load(path string, seen map[string]bool) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(b)
	if err != nil {
		return nil, err
	}
	t.Path, t.Region = path, DefaultRegion
	m, err := readManifest(filepath.Join(filepath.Dir(path), "manifest.json"))
	if err != nil || m == nil {
		return t, err
	}
	for id, a := range m.Artifacts {
		if a.Type != "aws:cloudformation:stack" || a.Properties.TemplateFile != filepath.Base(path) {
			continue
		}
		t.Stack = id
		account, region, err := environment(id, a.Environment)
		if err != nil {
			return nil, err
		}
		if account != "" && account != Account {
			return nil, fmt.Errorf("stack %s is synthesized for account %s: the local stack runs in account %s (synthesize with -c exactonce:account=%s)", id, account, Account, Account)
		}
		if region != "" {
			t.Region = region
		}
		seen[id] = true
		for _, dep := range a.Dependencies {
			da, ok := m.Artifacts[dep]
			if !ok || da.Type != "aws:cloudformation:stack" || seen[dep] {
				continue
			}
			dt, err := load(filepath.Join(filepath.Dir(path), da.Properties.TemplateFile), seen)
			if err != nil {
				return nil, fmt.Errorf("stack %s depends on %s: %w", id, dep, err)
			}
			t.Dependencies = append(t.Dependencies, dt)
		}
	}
	return t, nil
}

// manifest is the part of a cloud assembly's manifest.json the suite reads.
type manifest struct {
	Artifacts map[string]struct {
		Type         string   `json:"type"`
		Environment  string   `json:"environment"`
		Dependencies []string `json:"dependencies"`
		Properties   struct {
			TemplateFile string `json:"templateFile"`
		} `json:"properties"`
	} `json:"artifacts"`
}

func readManifest(path string) (*manifest, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &m, nil
}

// environment reads a stack's "aws://ACCOUNT/REGION" ("" for unknown-…).
func environment(stack, env string) (account, region string, err error) {
	rest, ok := strings.CutPrefix(env, "aws://")
	account, region, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		return "", "", fmt.Errorf("stack %s: environment %q is not aws://ACCOUNT/REGION", stack, env)
	}
	if account == "unknown-account" {
		account = ""
	}
	if region == "unknown-region" {
		region = ""
	}
	return account, region, nil
}

// Parse reads a template.
func Parse(b []byte) (*Template, error) {
	var t Template
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	if len(t.Resources) == 0 {
		return nil, fmt.Errorf("template: no resources")
	}
	return &t, nil
}

// OfType returns the logical ids of the resources of type typ, sorted.
func (t *Template) OfType(typ string) []string {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Names are a local stack's answers to Ref and Fn::GetAtt: the physical
// name (Ref) and attributes of each resource by logical id.
type Names struct {
	Refs  map[string]string
	Attrs map[string]map[string]string
}

// LocalNames gives every resource the name and ARNs it has in the local
// stack: its logical id as its physical name (or the name the template
// sets), in account Account and the template's Region. Attributes only
// known once the resource exists (a table's StreamArn, a custom resource's
// outputs) are set by the caller.
func LocalNames(t *Template) *Names {
	n := &Names{Refs: map[string]string{}, Attrs: map[string]map[string]string{}}
	region := t.Region
	if region == "" {
		region = DefaultRegion
	}
	arn := func(service, resource string) string { return ARN(service, region, resource) }
	for id, r := range t.Resources {
		name := id
		attrs := map[string]string{}
		switch r.Type {
		case "AWS::DynamoDB::Table", "AWS::DynamoDB::GlobalTable":
			name = propString(r, "TableName", id)
			attrs["Arn"] = arn("dynamodb", "table/"+name)
		case "AWS::SecretsManager::Secret":
			name = SecretARN(region, propString(r, "Name", id))
		case "AWS::SQS::Queue":
			qn := propString(r, "QueueName", id)
			name = "https://sqs." + region + ".amazonaws.com/" + Account + "/" + qn
			attrs["Arn"], attrs["QueueName"], attrs["QueueUrl"] = arn("sqs", qn), qn, name
		case "AWS::Events::EventBus":
			name = propString(r, "Name", id)
			attrs["Arn"], attrs["Name"] = arn("events", "event-bus/"+name), name
		case "AWS::Events::Rule":
			attrs["Arn"] = arn("events", "rule/"+id)
		case "AWS::Lambda::Function":
			name = propString(r, "FunctionName", id)
			attrs["Arn"] = arn("lambda", "function:"+name)
		case "AWS::IAM::Role":
			name = propString(r, "RoleName", id)
			attrs["Arn"] = "arn:" + Partition + ":iam::" + Account + ":role/" + name
		case "AWS::Logs::LogGroup":
			name = propString(r, "LogGroupName", id)
			attrs["Arn"] = arn("logs", "log-group:"+name+":*")
		case "AWS::SNS::Topic":
			name = arn("sns", id)
			attrs["TopicArn"] = name
		case "AWS::SSM::Parameter":
			name = propString(r, "Name", id)
		case "AWS::ApiGatewayV2::Api":
			name = strings.ToLower(id)
			attrs["ApiEndpoint"] = "http://" + name + ".local"
		}
		n.Refs[id] = name
		n.Attrs[id] = attrs
	}
	stack := t.Stack
	if stack == "" {
		stack = "ExactOnce"
	}
	n.Refs["AWS::Region"], n.Refs["AWS::AccountId"], n.Refs["AWS::Partition"] = region, Account, Partition
	n.Refs["AWS::URLSuffix"], n.Refs["AWS::StackName"] = "amazonaws.com", stack
	return n
}

// Region is the Region of the local stack the names are in.
func (n *Names) Region() string { return n.Refs["AWS::Region"] }

// ARN is the ARN of a resource of the local account in region.
func ARN(service, region, resource string) string {
	return "arn:" + Partition + ":" + service + ":" + region + ":" + Account + ":" + resource
}

// SecretARN is the local ARN of the secret named name in region: Secrets
// Manager adds a hyphen and six random characters to the name.
func SecretARN(region, name string) string {
	return ARN("secretsmanager", region, "secret:"+name+"-e2e000")
}

func propString(r Resource, key, def string) string {
	if s, ok := r.Properties[key].(string); ok && s != "" {
		return s
	}
	return def
}

// Resolve returns v with every intrinsic function replaced by its value.
func (n *Names) Resolve(v any) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 1 {
			for k, arg := range v {
				if k == "Ref" || strings.HasPrefix(k, "Fn::") {
					return n.intrinsic(k, arg)
				}
			}
		}
		out := make(map[string]any, len(v))
		for k, e := range v {
			r, err := n.Resolve(e)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			r, err := n.Resolve(e)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

// String resolves v, which must come out a string.
func (n *Names) String(v any) (string, error) {
	r, err := n.Resolve(v)
	if err != nil {
		return "", err
	}
	s, ok := r.(string)
	if !ok {
		return "", fmt.Errorf("template: %v is not a string", r)
	}
	return s, nil
}

var subVar = regexp.MustCompile(`\$\{([^}!]+)\}`)

func (n *Names) intrinsic(fn string, arg any) (any, error) {
	switch fn {
	case "Ref":
		id, _ := arg.(string)
		v, ok := n.Refs[id]
		if !ok {
			return nil, fmt.Errorf("template: Ref %q: no such resource or parameter", id)
		}
		return v, nil
	case "Fn::GetAtt":
		var id, attr string
		switch a := arg.(type) {
		case []any:
			if len(a) == 2 {
				id, _ = a[0].(string)
				attr, _ = a[1].(string)
			}
		case string:
			id, attr, _ = strings.Cut(a, ".")
		}
		v, ok := n.Attrs[id][attr]
		if !ok {
			return nil, fmt.Errorf("template: Fn::GetAtt %s.%s: the local stack has no such attribute", id, attr)
		}
		return v, nil
	case "Fn::Join":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return nil, fmt.Errorf("template: Fn::Join needs [separator, list]")
		}
		sep, _ := a[0].(string)
		list, err := n.Resolve(a[1])
		if err != nil {
			return nil, err
		}
		items, _ := list.([]any)
		parts := make([]string, len(items))
		for i, it := range items {
			s, ok := it.(string)
			if !ok {
				return nil, fmt.Errorf("template: Fn::Join of a non-string %v", it)
			}
			parts[i] = s
		}
		return strings.Join(parts, sep), nil
	case "Fn::Select":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return nil, fmt.Errorf("template: Fn::Select needs [index, list]")
		}
		idx, err := n.Resolve(a[0])
		if err != nil {
			return nil, err
		}
		list, err := n.Resolve(a[1])
		if err != nil {
			return nil, err
		}
		var i int
		switch x := idx.(type) {
		case float64:
			i = int(x)
		case string:
			_, _ = fmt.Sscan(x, &i)
		}
		items, _ := list.([]any)
		if i < 0 || i >= len(items) {
			return nil, fmt.Errorf("template: Fn::Select index %d out of range", i)
		}
		return items[i], nil
	case "Fn::Split":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return nil, fmt.Errorf("template: Fn::Split needs [separator, string]")
		}
		sep, _ := a[0].(string)
		s, err := n.String(a[1])
		if err != nil {
			return nil, err
		}
		var out []any
		for _, p := range strings.Split(s, sep) {
			out = append(out, p)
		}
		return out, nil
	case "Fn::Sub":
		text, vars := "", map[string]any{}
		switch a := arg.(type) {
		case string:
			text = a
		case []any:
			if len(a) == 2 {
				text, _ = a[0].(string)
				vars, _ = a[1].(map[string]any)
			}
		}
		var err error
		out := subVar.ReplaceAllStringFunc(text, func(m string) string {
			name := m[2 : len(m)-1]
			var v any
			if x, ok := vars[name]; ok {
				v = x
			} else if id, attr, ok := strings.Cut(name, "."); ok {
				v = map[string]any{"Fn::GetAtt": []any{id, attr}}
			} else {
				v = map[string]any{"Ref": name}
			}
			s, e := n.String(v)
			if e != nil {
				err = e
			}
			return s
		})
		return out, err
	}
	return nil, fmt.Errorf("template: %s is not supported by the local stack", fn)
}
