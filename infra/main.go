// Command infra is the ExactOnce CDK app: `cdk synth` / `cdk deploy` run it
// (see cdk.json). It compiles the functions itself, so a fresh clone deploys
// with no other step. Everything it deploys is the construct in
// infra/exactonce; this app only reads the context below into its Props.
//
// Context (cdk.json or -c key=value):
//
//	exactonce:stackName    stack name (default ExactOnce)
//	exactonce:throwaway    true: no deletion protection, resources destroyed with the stack
//	exactonce:auth         iam (default) or jwt
//	exactonce:jwtIssuer    JWT issuer URL (auth=jwt)
//	exactonce:jwtAudience  comma-separated audiences (auth=jwt)
//	exactonce:alarmEmail   email subscribed to every alarm
//	exactonce:eventSource  source of published events (default exactonce)
//	exactonce:exampleSubscriber  true: deploy the example audit subscriber
//	exactonce:expiryShards partitions of the expiry index (default 16; only ever raise it)
//	exactonce:tracing      true: X-Ray active tracing, AWS SDK calls as subsegments (default false)
//	exactonce:reservedConcurrency  off (default) or N: N concurrent executions reserved for the publisher
//	                       and 2 for the sweeper; the Region's quota must then be at least 100 + N + 2
//	exactonce:tenants      tenant map, JSON {"tenant": ["principal pattern", ...]} (default: one tenant)
//	exactonce:tenantClaim  JWT claim matched against the tenant map (auth=jwt; default sub)
//	exactonce:exampleSubscriberTenant  the example subscriber's rule takes only this tenant's events
//	exactonce:regions      comma-separated replica Regions: one stack per Region on one MRSC global table
//	                       (two with exactonce:witnessRegion, or three); unset: the single-Region stack
//	exactonce:witnessRegion  the MRSC witness Region (with two exactonce:regions)
//	exactonce:tableName    the global table's name (with exactonce:regions; default <stackName>-actions)
//	exactonce:account      the account of the multi-Region stacks (default: $CDK_DEFAULT_ACCOUNT, which the
//	                       CDK CLI sets from your credentials; without either, the placeholder 000000000000)
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/exactonce/exactonce/infra/exactonce"
	"github.com/exactonce/exactonce/shared/tenant"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	props, err := propsFrom(app)
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
	root, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	// Traced builds carry the X-Ray SDK (twice the binary, +17 ms cold
	// start); they get their own folder so the two never share an asset.
	buildDir, tags := filepath.Join(root, "dist", "lambda"), []string(nil)
	if props.Tracing {
		buildDir, tags = filepath.Join(root, "dist", "lambda-xray"), []string{"xray"}
	}
	props.Code = exactonce.AssetCode(buildDir)
	if err := props.Validate(); err != nil { // before the build: a wrong option fails at once
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
	if err := exactonce.BuildFunctions(root, buildDir, tags...); err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
	name := contextString(app, "exactonce:stackName", "ExactOnce")
	account := contextString(app, "exactonce:account", os.Getenv("CDK_DEFAULT_ACCOUNT"))
	NewStacks(app, name, account, &awscdk.StackProps{Description: jsii.String("ExactOnce: actions consumed exactly once")}, props)
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	app.Synth(nil)
}

// NewStack is the standalone ExactOnce stack: the construct, with the
// logical ids this stack always had (so a deployed stack keeps its table and
// secret), and its outputs.
func NewStack(scope constructs.Construct, id string, props *awscdk.StackProps, p exactonce.Props) awscdk.Stack {
	stack := awscdk.NewStack(scope, &id, props)
	p.StackLogicalIds = true
	exactonce.New(stack, "ExactOnce", &p).AddOutputs(stack)
	return stack
}

// PlaceholderAccount is the account of the multi-Region stacks when neither
// exactonce:account nor $CDK_DEFAULT_ACCOUNT names one: synth works offline,
// and a deploy with it stops before changing anything (the CLI refuses
// credentials of another account).
const PlaceholderAccount = "000000000000"

// NewStacks is the standalone app's stacks: the single-Region stack "name",
// or with p.MultiRegion one stack per Region, "name-<region>", each in that
// Region of account (PlaceholderAccount when ""), every other one after the
// first Region's, which creates the global table.
func NewStacks(scope constructs.Construct, name, account string, props *awscdk.StackProps, p exactonce.Props) []awscdk.Stack {
	if p.MultiRegion == nil {
		return []awscdk.Stack{NewStack(scope, name, props, p)}
	}
	if account == "" {
		account = PlaceholderAccount
	}
	var stacks []awscdk.Stack
	for _, region := range p.MultiRegion.Regions {
		sp := *props
		sp.Env = &awscdk.Environment{Account: jsii.String(account), Region: jsii.String(region)}
		stack := NewStack(scope, name+"-"+region, &sp, p)
		if len(stacks) > 0 {
			stack.AddStackDependency(stacks[0], jsii.String("the first Region's stack creates the global table and its replicas"))
		}
		stacks = append(stacks, stack)
	}
	return stacks
}

// propsFrom reads the construct's props from CDK context (all but Code).
func propsFrom(app awscdk.App) (exactonce.Props, error) {
	p := exactonce.Props{
		Auth:                    exactonce.Auth(contextString(app, "exactonce:auth", "iam")),
		JwtIssuer:               contextString(app, "exactonce:jwtIssuer", ""),
		AlarmEmail:              contextString(app, "exactonce:alarmEmail", ""),
		EventSource:             contextString(app, "exactonce:eventSource", "exactonce"),
		TenantClaim:             contextString(app, "exactonce:tenantClaim", ""),
		ExampleSubscriberTenant: contextString(app, "exactonce:exampleSubscriberTenant", ""),
	}
	for _, b := range []struct {
		key string
		to  *bool
	}{{"exactonce:throwaway", &p.Throwaway}, {"exactonce:exampleSubscriber", &p.ExampleSubscriber}, {"exactonce:tracing", &p.Tracing}} {
		switch v := contextString(app, b.key, "false"); v {
		case "true", "false":
			*b.to = v == "true"
		default:
			return p, fmt.Errorf("%s must be true or false, not %q", b.key, v)
		}
	}
	if v := app.Node().TryGetContext(jsii.String("exactonce:tenants")); v != nil {
		text, ok := v.(string) // -c exactonce:tenants='{"a":["..."]}'
		if !ok {               // an object in cdk.json
			b, err := json.Marshal(v)
			if err != nil {
				return p, fmt.Errorf("exactonce:tenants: %w", err)
			}
			text = string(b)
		}
		if _, err := tenant.Parse(text); err != nil {
			return p, fmt.Errorf("exactonce:tenants: %w", err)
		}
		if strings.TrimSpace(text) != "" {
			if err := json.Unmarshal([]byte(text), &p.Tenants); err != nil {
				return p, fmt.Errorf("exactonce:tenants: %w", err)
			}
		}
	}
	switch v := contextString(app, "exactonce:reservedConcurrency", "off"); v {
	case "off", "0", "":
	default:
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return p, fmt.Errorf("exactonce:reservedConcurrency must be off or a whole number of concurrent executions (e.g. 20), not %q", v)
		}
		p.ReservedConcurrency = n
	}
	if v := contextString(app, "exactonce:expiryShards", ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return p, fmt.Errorf("exactonce:expiryShards must be a whole number from 1 to 1000, not %q", v)
		}
		p.ExpiryShards = n
	}
	if regions := contextString(app, "exactonce:regions", ""); regions != "" {
		p.MultiRegion = &exactonce.MultiRegion{
			Regions:       strings.Split(strings.ReplaceAll(regions, " ", ""), ","),
			WitnessRegion: contextString(app, "exactonce:witnessRegion", ""),
			TableName:     contextString(app, "exactonce:tableName", contextString(app, "exactonce:stackName", "ExactOnce")+"-actions"),
		}
		if err := p.MultiRegion.Validate(); err != nil {
			return p, fmt.Errorf("exactonce:regions: %w", err)
		}
	} else if contextString(app, "exactonce:witnessRegion", "") != "" {
		return p, fmt.Errorf("exactonce:witnessRegion needs exactonce:regions")
	}
	if aud := contextString(app, "exactonce:jwtAudience", ""); aud != "" {
		for _, a := range strings.Split(aud, ",") {
			p.JwtAudience = append(p.JwtAudience, strings.TrimSpace(a))
		}
	}
	switch p.Auth {
	case exactonce.AuthIAM:
	case exactonce.AuthJWT:
		if p.JwtIssuer == "" || len(p.JwtAudience) == 0 {
			return p, fmt.Errorf("exactonce:auth=jwt needs exactonce:jwtIssuer and exactonce:jwtAudience")
		}
	default:
		return p, fmt.Errorf("exactonce:auth must be iam or jwt, not %q", p.Auth)
	}
	return p, nil
}

func contextString(app awscdk.App, key, def string) string {
	v := app.Node().TryGetContext(jsii.String(key))
	if v == nil {
		return def
	}
	return fmt.Sprint(v)
}
