package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/exactonce/exactonce/infra/exactonce"
)

func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// TestPropsFrom: the context options become the construct's typed props
// (the construct's own tests cover what each prop deploys): audiences are
// comma-separated, spaces around them dropped; a flag is true or false,
// anything else refused (True was read as false).
func TestPropsFrom(t *testing.T) {
	app := func(ctx map[string]any) awscdk.App {
		return awscdk.NewApp(&awscdk.AppProps{Context: &ctx})
	}
	p, err := propsFrom(app(map[string]any{
		"exactonce:throwaway": "true", "exactonce:auth": "jwt", "exactonce:jwtIssuer": "https://i.example", "exactonce:jwtAudience": "a, b",
		"exactonce:alarmEmail": "ops@example.com", "exactonce:eventSource": "shop", "exactonce:exampleSubscriber": true,
		"exactonce:expiryShards": "32", "exactonce:tracing": "true", "exactonce:tenantClaim": "client_id",
		"exactonce:exampleSubscriberTenant": "coupons", "exactonce:tenants": map[string]any{"coupons": []any{"arn:aws:iam::1:role/c-*"}},
	}))
	want := exactonce.Props{
		Throwaway: true, Auth: exactonce.AuthJWT, JwtIssuer: "https://i.example", JwtAudience: []string{"a", "b"},
		AlarmEmail: "ops@example.com", EventSource: "shop", ExampleSubscriber: true, ExpiryShards: 32, Tracing: true,
		TenantClaim: "client_id", ExampleSubscriberTenant: "coupons", Tenants: map[string][]string{"coupons": {"arn:aws:iam::1:role/c-*"}},
	}
	if err != nil || !reflect.DeepEqual(p, want) {
		t.Fatalf("props %+v, %v\nwant %+v", p, err, want)
	}
	p, err = propsFrom(app(map[string]any{"exactonce:tenants": `{"a": ["x"]}`}))
	if err != nil || !reflect.DeepEqual(p.Tenants, map[string][]string{"a": {"x"}}) || p.Auth != exactonce.AuthIAM || p.EventSource != "exactonce" {
		t.Fatalf("string tenant map / defaults: %+v, %v", p, err)
	}
	for ctx, wantErr := range map[string]string{
		"exactonce:auth=ldap":                             "exactonce:auth must be iam or jwt",
		"exactonce:auth=jwt":                              "needs exactonce:jwtIssuer",
		"exactonce:expiryShards=0":                        "from 1 to 1000",
		`exactonce:tenants={"a":[]}`:                      "no principal patterns",
		"exactonce:expiryShards=many":                     "whole number",
		"exactonce:witnessRegion=us-west-2":               "needs exactonce:regions",
		"exactonce:regions=us-east-1,us-east-2":           "needs 3 Regions, or 2 and a WitnessRegion",
		"exactonce:regions=us-east-1,eu-west-1,us-west-2": "not in one MRSC Region set",
		"exactonce:throwaway=True":                        "exactonce:throwaway must be true or false",
		"exactonce:exampleSubscriber=yes":                 "exactonce:exampleSubscriber must be true or false",
	} {
		k, v, _ := strings.Cut(ctx, "=")
		if _, err := propsFrom(app(map[string]any{k: v})); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: %v, want %q", ctx, err, wantErr)
		}
	}
}

// TestMultiRegionStacks: exactonce:regions and exactonce:witnessRegion make
// one stack per Region, in the account given (or the placeholder), the
// later ones deployed after the first, on one table named after the stack.
func TestMultiRegionStacks(t *testing.T) {
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir()), Context: &map[string]any{
		"exactonce:regions": "us-east-1, us-east-2", "exactonce:witnessRegion": "us-west-2", "exactonce:stackName": "Shop",
	}})
	p, err := propsFrom(app)
	want := exactonce.MultiRegion{Regions: []string{"us-east-1", "us-east-2"}, WitnessRegion: "us-west-2", TableName: "Shop-actions"}
	if err != nil || p.MultiRegion == nil || !reflect.DeepEqual(*p.MultiRegion, want) {
		t.Fatalf("props %+v, %v", p.MultiRegion, err)
	}
	dir := t.TempDir()
	for _, f := range exactonce.Functions {
		if err := os.MkdirAll(dir+"/"+f, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/"+f+"/bootstrap", []byte(f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p.Code = exactonce.AssetCode(dir)
	stacks := NewStacks(app, "Shop", "", &awscdk.StackProps{}, p)
	var got []string
	for _, s := range stacks {
		got = append(got, *s.StackName()+" "+*s.Account()+" "+*s.Region())
	}
	if strings.Join(got, ", ") != "Shop-us-east-1 000000000000 us-east-1, Shop-us-east-2 000000000000 us-east-2" {
		t.Errorf("stacks: %v", got)
	}
	if deps := *stacks[1].Dependencies(); len(deps) != 1 || *deps[0].StackName() != "Shop-us-east-1" {
		t.Errorf("Shop-us-east-2 does not deploy after Shop-us-east-1")
	}
	if s := NewStacks(awscdk.NewApp(nil), "One", "", &awscdk.StackProps{}, exactonce.Props{Code: p.Code}); len(s) != 1 || *s[0].StackName() != "One" {
		t.Errorf("without regions: %d stacks", len(s))
	}
}

// TestFeatureFlags: cdk.json sets every feature flag the pinned aws-cdk-lib
// recommends (its recommended-feature-flags.json, what `cdk init` writes),
// to the recommended value, so `make synth` reports no unconfigured flags.
func TestFeatureFlags(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/aws/aws-cdk-go/awscdk/v2").Output()
	if err != nil {
		t.Fatal(err)
	}
	tgzs, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "jsii", "aws-cdk-lib-*.tgz"))
	if len(tgzs) != 1 {
		t.Fatalf("aws-cdk-lib tarball: %v", tgzs)
	}
	f, err := os.Open(tgzs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var recommended map[string]any
	for tr := tar.NewReader(gz); recommended == nil; {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no package/recommended-feature-flags.json in %s: %v", tgzs[0], err)
		}
		if h.Name == "package/recommended-feature-flags.json" {
			if err := json.NewDecoder(tr).Decode(&recommended); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := os.ReadFile("../cdk.json")
	if err != nil {
		t.Fatal(err)
	}
	var cdk struct{ Context map[string]any }
	if err := json.Unmarshal(b, &cdk); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d recommended flags", len(recommended))
	for k, v := range recommended {
		if got, ok := cdk.Context[k]; !ok || !reflect.DeepEqual(got, v) {
			t.Errorf("cdk.json: %s is %v, recommended %v", k, got, v)
		}
	}
}
