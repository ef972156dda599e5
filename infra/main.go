// Command infra is the ExactOnce CDK app: `cdk synth` / `cdk deploy` run it
// (see cdk.json). It compiles the functions itself, so a fresh clone deploys
// with no other step.
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
//	exactonce:tenants      tenant map, JSON {"tenant": ["principal pattern", ...]} (default: one tenant)
//	exactonce:tenantClaim  JWT claim matched against the tenant map (auth=jwt; default sub)
//	exactonce:exampleSubscriberTenant  the example subscriber's rule takes only this tenant's events
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/exactonce/exactonce/shared/tenant"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	s, err := settingsFrom(app)
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
	if s.Tracing {
		buildDir, tags = filepath.Join(root, "dist", "lambda-xray"), []string{"xray"}
	}
	if err := BuildFunctions(root, buildDir, tags...); err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
	s.Code = func(name string) string { return filepath.Join(buildDir, name) }
	name := contextString(app, "exactonce:stackName", "ExactOnce")
	NewStack(app, name, &awscdk.StackProps{Description: jsii.String("ExactOnce: actions consumed exactly once")}, s)
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	app.Synth(nil)
}

// settingsFrom reads the stack settings from CDK context.
func settingsFrom(app awscdk.App) (Settings, error) {
	s := Settings{
		Throwaway:         contextString(app, "exactonce:throwaway", "false") == "true",
		Auth:              contextString(app, "exactonce:auth", "iam"),
		JwtIssuer:         contextString(app, "exactonce:jwtIssuer", ""),
		AlarmEmail:        contextString(app, "exactonce:alarmEmail", ""),
		EventSource:       contextString(app, "exactonce:eventSource", "exactonce"),
		ExampleSubscriber: contextString(app, "exactonce:exampleSubscriber", "false") == "true",
		Tracing:           contextString(app, "exactonce:tracing", "false") == "true",
		TenantClaim:       contextString(app, "exactonce:tenantClaim", ""),
		SubscriberTenant:  contextString(app, "exactonce:exampleSubscriberTenant", ""),
	}
	if v := app.Node().TryGetContext(jsii.String("exactonce:tenants")); v != nil {
		text, ok := v.(string) // -c exactonce:tenants='{"a":["..."]}'
		if !ok {               // an object in cdk.json
			b, err := json.Marshal(v)
			if err != nil {
				return s, fmt.Errorf("exactonce:tenants: %w", err)
			}
			text = string(b)
		}
		if _, err := tenant.Parse(text); err != nil {
			return s, fmt.Errorf("exactonce:tenants: %w", err)
		}
		s.Tenants = text
	}
	if v := contextString(app, "exactonce:expiryShards", ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return s, fmt.Errorf("exactonce:expiryShards must be a whole number from 1 to 1000, not %q", v)
		}
		s.ExpiryShards = n
	}
	if aud := contextString(app, "exactonce:jwtAudience", ""); aud != "" {
		s.JwtAudience = strings.Split(aud, ",")
	}
	switch s.Auth {
	case "iam":
	case "jwt":
		if s.JwtIssuer == "" || len(s.JwtAudience) == 0 {
			return s, fmt.Errorf("exactonce:auth=jwt needs exactonce:jwtIssuer and exactonce:jwtAudience")
		}
	default:
		return s, fmt.Errorf("exactonce:auth must be iam or jwt, not %q", s.Auth)
	}
	return s, nil
}

func contextString(app awscdk.App, key, def string) string {
	v := app.Node().TryGetContext(jsii.String(key))
	if v == nil {
		return def
	}
	return fmt.Sprint(v)
}
