package exactonce

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// moduleRoot is the repository root (tests run in a temporary folder, see TestMain).
var moduleRoot string

// featureFlags are the CDK feature flags of cdk.json (its "@aws-cdk…"
// context), which `make synth` and `make deploy` run with: the tests
// synthesize with them too, so what they check is what deploys.
var featureFlags map[string]any

// placeholders holds a placeholder bootstrap per function (the real build
// is exercised by TestAssetHashesStable).
var placeholders string

// TestMain runs the tests in a temporary folder holding dist/lambda with a
// placeholder per function, so Example's AssetCode("dist/lambda") finds its
// assets as a real app would after BuildFunctions, and closes jsii.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		defer jsii.Close()
		var err error
		if moduleRoot, err = filepath.Abs("../.."); err != nil {
			panic(err)
		}
		cdkJSON, err := os.ReadFile(filepath.Join(moduleRoot, "cdk.json"))
		if err != nil {
			panic(err)
		}
		var cdk struct{ Context map[string]any }
		if err := json.Unmarshal(cdkJSON, &cdk); err != nil {
			panic(err)
		}
		featureFlags = map[string]any{}
		for k, v := range cdk.Context {
			if strings.HasPrefix(k, "@aws-cdk") {
				featureFlags[k] = v
			}
		}
		dir, err := os.MkdirTemp("", "exactonce-test")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		placeholders = filepath.Join(dir, "dist", "lambda")
		for _, f := range Functions {
			if err := os.MkdirAll(filepath.Join(placeholders, f), 0o755); err != nil {
				panic(err)
			}
			if err := os.WriteFile(filepath.Join(placeholders, f, "bootstrap"), []byte("placeholder "+f), 0o755); err != nil {
				panic(err)
			}
		}
		if err := os.Chdir(dir); err != nil {
			panic(err)
		}
		return m.Run()
	}())
}

// synth builds ExactOnce as the standalone app does (stack "Test", the
// stack's logical ids, its outputs) with cdk-nag applied.
func synth(t *testing.T, p Props) (awscdk.Stack, map[string]any) {
	t.Helper()
	p.StackLogicalIds = true
	return synthStack(t, "Test", p)
}

// synthStack builds ExactOnce in stack id with p as given (p.StackLogicalIds
// false: the nested ids of an embedding); placeholder code unless p.Code.
func synthStack(t *testing.T, id string, p Props) (awscdk.Stack, map[string]any) {
	t.Helper()
	if p.Code == nil {
		p.Code = AssetCode(placeholders)
	}
	var stack awscdk.Stack
	var tmpl map[string]any
	must(t, func() {
		app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir()), Context: &featureFlags})
		stack = awscdk.NewStack(app, jsii.String(id), nil)
		New(stack, "ExactOnce", &p).AddOutputs(stack)
		awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
		tmpl = *assertions.Template_FromStack(stack, nil).ToJSON()
	})
	return stack, tmpl
}

// must turns an assertion's panic (how jsii reports a failed CDK assertion)
// into a test failure.
func must(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%v", r)
		}
	}()
	f()
}

// resources returns the template's resources of one type, by logical id.
func resources(tmpl map[string]any, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range tmpl["Resources"].(map[string]any) {
		if res := r.(map[string]any); res["Type"] == typ {
			out[id] = res
		}
	}
	return out
}

func props(r map[string]any) map[string]any { p, _ := r["Properties"].(map[string]any); return p }

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

// resourceNames shortens a statement's resources to the logical ids they
// refer to (without the hash), or "*".
func resourceNames(v any) string {
	s := jsonOf(v)
	if s == `"*"` {
		return "*"
	}
	for _, name := range []string{"CreateLogs", "GetLogs", "ConsumeLogs", "CancelLogs", "KeyclaimLogs", "KeycompleteLogs", "KeyreleaseLogs", "KeygetLogs", "UserlistLogs", "UsercancelLogs", "UsereleaseLogs", "UselistLogs", "PublisherLogs", "SweeperLogs", "RepublishLogs", "ServerSecret", "PublisherOnFailure", "Actions", "Bus"} {
		if strings.Contains(s, `"`+name) {
			if i := strings.Index(s, "/index/"); i >= 0 {
				return name + strings.TrimRight(s[i:], `"]}`)
			}
			return name
		}
	}
	return s
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
