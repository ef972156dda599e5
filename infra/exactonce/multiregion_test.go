package exactonce

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

var twoAndWitness = MultiRegion{Regions: []string{"us-east-1", "us-east-2"}, WitnessRegion: "us-west-2", TableName: "ExactOnce-actions"}

// synthRegions builds one stack per Region of m as the standalone app does
// (infra.NewStacks: stack logical ids, outputs, cdk-nag), the later ones
// depending on the first, and returns them with their templates.
func synthRegions(t *testing.T, m MultiRegion, p Props) ([]awscdk.Stack, []map[string]any) {
	t.Helper()
	p.Code, p.StackLogicalIds, p.MultiRegion = AssetCode(placeholders), true, &m
	var stacks []awscdk.Stack
	var tmpls []map[string]any
	must(t, func() {
		app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
		for _, r := range m.Regions {
			s := awscdk.NewStack(app, jsii.String("ExactOnce-"+r), &awscdk.StackProps{Env: &awscdk.Environment{Account: jsii.String("000000000000"), Region: jsii.String(r)}})
			New(s, "ExactOnce", &p).AddOutputs(s)
			if len(stacks) > 0 {
				s.AddStackDependency(stacks[0], jsii.String("global table"))
			}
			stacks = append(stacks, s)
		}
		awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
		for _, s := range stacks {
			tmpls = append(tmpls, *assertions.Template_FromStack(s, nil).ToJSON())
		}
	})
	return stacks, tmpls
}

// TestMultiRegion (issue 25): exactonce:regions=us-east-1,us-east-2 with
// the witness us-west-2 is one stack per Region. The first creates the MRSC
// global table (STRONG, the witness, streams on every replica, PITR and
// deletion protection on each, no TTL, the same indexes) and the server
// secret, replicated; the second finds its replica's stream with one
// DescribeTable. Each Region has the whole service (API, 15 functions,
// publisher on its own replica's stream, its own bus, sweeper with the daily
// purge, 18 alarms), its IAM naming only its own Region, and cdk-nag
// reports no error.
func TestMultiRegion(t *testing.T) {
	stacks, tmpls := synthRegions(t, twoAndWitness, Props{})
	primary, second := tmpls[0], tmpls[1]

	globals := resources(primary, "AWS::DynamoDB::GlobalTable")
	if len(globals) != 1 || len(resources(primary, "AWS::DynamoDB::Table")) != 0 {
		t.Fatalf("first Region: %d global tables, %d tables", len(globals), len(resources(primary, "AWS::DynamoDB::Table")))
	}
	for _, g := range globals {
		p := props(g)
		for k, want := range map[string]string{
			"TableName":               `"ExactOnce-actions"`,
			"MultiRegionConsistency":  `"STRONG"`,
			"GlobalTableWitnesses":    `[{"Region":"us-west-2"}]`,
			"StreamSpecification":     `{"StreamViewType":"NEW_AND_OLD_IMAGES"}`,
			"KeySchema":               `[{"AttributeName":"actionId","KeyType":"HASH"}]`,
			"BillingMode":             `"PAY_PER_REQUEST"`,
			"GlobalSecondaryIndexes":  `[{"IndexName":"byExpiry","KeySchema":[{"AttributeName":"expShard","KeyType":"HASH"},{"AttributeName":"expiresAtMs","KeyType":"RANGE"}],"Projection":{"ProjectionType":"KEYS_ONLY"}},{"IndexName":"byUser","KeySchema":[{"AttributeName":"userKey","KeyType":"HASH"},{"AttributeName":"createdAtMs","KeyType":"RANGE"}],"Projection":{"ProjectionType":"KEYS_ONLY"}}]`,
			"TimeToLiveSpecification": `null`, // MRSC tables have no TTL
		} {
			if got := jsonOf(p[k]); got != want {
				t.Errorf("global table %s = %s, want %s", k, got, want)
			}
		}
		var regions []string
		for _, r := range p["Replicas"].([]any) {
			r := r.(map[string]any)
			regions = append(regions, r["Region"].(string))
			if jsonOf(r["PointInTimeRecoverySpecification"]) != `{"PointInTimeRecoveryEnabled":true}` || r["DeletionProtectionEnabled"] != true {
				t.Errorf("replica %v: PITR or deletion protection missing", r)
			}
		}
		if !sameSet(regions, []string{"us-east-1", "us-east-2"}) || g["DeletionPolicy"] != "Retain" {
			t.Errorf("replicas %v, deletion policy %v", regions, g["DeletionPolicy"])
		}
	}
	if n := len(resources(second, "AWS::DynamoDB::GlobalTable")) + len(resources(second, "AWS::DynamoDB::Table")); n != 0 {
		t.Errorf("second Region defines %d tables", n)
	}
	var streamOf string
	for id, cr := range resources(second, "Custom::AWS") {
		if c := props(cr)["Create"].(string); strings.Contains(c, `"action":"describeTable"`) && strings.Contains(c, `"TableName":"ExactOnce-actions"`) {
			streamOf = id
		}
	}
	for i, tmpl := range tmpls {
		region := twoAndWitness.Regions[i]
		ours := 0
		for id, fn := range resources(tmpl, "AWS::Lambda::Function") {
			env, _ := props(fn)["Environment"].(map[string]any)
			if env == nil {
				continue // the CDK's custom resource provider
			}
			ours++
			vars := env["Variables"].(map[string]any)
			if tn, ok := vars["TABLE_NAME"]; ok && i == 1 && tn != "ExactOnce-actions" {
				t.Errorf("%s %s: TABLE_NAME %v", region, id, tn)
			}
			if strings.HasPrefix(id, "Sweeper") && props(fn)["Timeout"] != 900.0 {
				t.Errorf("%s sweeper timeout %v, want 900 (the daily purge)", region, props(fn)["Timeout"])
			}
			if arn, ok := vars["EXACTONCE_SECRET_ARN"]; ok && i == 1 && arn != "ExactOnce-actions/server" {
				t.Errorf("%s %s: secret %v, want the replica's name", region, id, arn)
			}
		}
		counts := map[string]int{"AWS::ApiGatewayV2::Api": 1, "AWS::Events::EventBus": 1, "AWS::CloudWatch::Alarm": 18, "AWS::Lambda::EventSourceMapping": 1, "AWS::SQS::Queue": 1}
		for typ, want := range counts {
			if got := len(resources(tmpl, typ)); got != want {
				t.Errorf("%s: %d %s, want %d", region, got, typ, want)
			}
		}
		if ours != 15 {
			t.Errorf("%s: %d functions, want 15", region, ours)
		}
		for _, m := range resources(tmpl, "AWS::Lambda::EventSourceMapping") {
			src := jsonOf(props(m)["EventSourceArn"])
			if (i == 0 && src != `{"Fn::GetAtt":["Actions9CCA2BC5","StreamArn"]}`) || (i == 1 && src != `{"Fn::GetAtt":["`+streamOf+`","Table.LatestStreamArn"]}`) {
				t.Errorf("%s: the publisher reads %s, not its Region's replica stream", region, src)
			}
		}
		purge := false
		for _, r := range resources(tmpl, "AWS::Events::Rule") {
			for _, tg := range props(r)["Targets"].([]any) {
				if in, _ := tg.(map[string]any)["Input"].(string); in == `{"purge":true}` && props(r)["ScheduleExpression"] == "rate(1 day)" {
					purge = true
				}
			}
		}
		if !purge {
			t.Errorf("%s: no daily purge", region)
		}
		// IAM names this Region's replica and secret only.
		policies := jsonOf(resources(tmpl, "AWS::IAM::Policy"))
		for _, other := range append(slices.Clone(twoAndWitness.Regions), twoAndWitness.WitnessRegion) {
			if other != region && strings.Contains(policies, other) {
				t.Errorf("%s: an IAM policy names %s", region, other)
			}
		}
		for _, want := range []string{`"dynamodb:Scan","dynamodb:DeleteItem"`} {
			if !strings.Contains(policies, want) {
				t.Errorf("%s: no policy allows %s", region, want)
			}
		}
		if i == 1 && (!strings.Contains(policies, `:dynamodb:us-east-2:000000000000:table/ExactOnce-actions"`) ||
			!strings.Contains(policies, `:secretsmanager:us-east-2:000000000000:secret:ExactOnce-actions/server-??????"`)) {
			t.Errorf("us-east-2 policies do not name its replica and its secret replica: %s", policies)
		}
	}
	secrets := resources(primary, "AWS::SecretsManager::Secret")
	for _, s := range secrets {
		if jsonOf(props(s)["ReplicaRegions"]) != `[{"Region":"us-east-2"}]` || props(s)["Name"] != "ExactOnce-actions/server" {
			t.Errorf("server secret not replicated: %s", jsonOf(props(s)))
		}
	}
	if len(secrets) != 1 || len(resources(second, "AWS::SecretsManager::Secret")) != 0 {
		t.Errorf("secrets: %d in the first Region, %d in the second", len(secrets), len(resources(second, "AWS::SecretsManager::Secret")))
	}
	if deps := *stacks[1].Dependencies(); len(deps) != 1 || *deps[0].StackName() != *stacks[0].StackName() {
		t.Errorf("the second Region's stack does not deploy after the first")
	}
	// The logical ids are pinned (testdata): a change of one replaces the
	// resource, and for the global table that is a new, empty table.
	for i, tmpl := range tmpls {
		path := moduleRoot + "/infra/exactonce/testdata/stack-ids-mrsc-" + twoAndWitness.Regions[i] + ".txt"
		if *update {
			if err := os.WriteFile(path, []byte(idList(tmpl)), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if want, err := os.ReadFile(path); err != nil || idList(tmpl) != string(want) {
			t.Errorf("%s: logical ids differ from testdata (%v) (-want +got):\n%s", twoAndWitness.Regions[i], err, lineDiff(string(want), idList(tmpl)))
		}
	}
	for i, stack := range stacks {
		must(t, func() {
			errs := assertions.Annotations_FromStack(stack).FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*")))
			for _, e := range *errs {
				t.Errorf("%s: nag error at %s: %v", twoAndWitness.Regions[i], *e.Id, e.Entry.Data)
			}
		})
	}
}

// TestMultiRegionValidate: MRSC's shape is checked before anything is
// synthesized: three Regions or two and a witness, one Region set, a table
// name, and the stack in one of the Regions.
func TestMultiRegionValidate(t *testing.T) {
	for _, c := range []struct {
		m    MultiRegion
		want string
	}{
		{MultiRegion{Regions: []string{"us-east-1", "us-east-2", "us-west-2"}, TableName: "t-1"}, ""},
		{MultiRegion{Regions: []string{"eu-west-1", "eu-west-2"}, WitnessRegion: "eu-central-1", TableName: "t-1"}, ""},
		{MultiRegion{Regions: []string{"us-east-1", "us-east-2"}, TableName: "t-1"}, "needs 3 Regions"},
		{MultiRegion{Regions: []string{"us-east-1", "us-east-2", "us-west-2"}, WitnessRegion: "us-west-2", TableName: "t-1"}, "exactly 2 Regions"},
		{MultiRegion{Regions: []string{"us-east-1", "eu-west-1"}, WitnessRegion: "us-west-2", TableName: "t-1"}, "not in one MRSC Region set"},
		{MultiRegion{Regions: []string{"us-east-1", "us-east-1"}, WitnessRegion: "us-west-2", TableName: "t-1"}, "named twice"},
		{MultiRegion{Regions: []string{"sa-east-1", "us-east-1"}, WitnessRegion: "us-west-2", TableName: "t-1"}, "not in an MRSC Region set"},
		{MultiRegion{Regions: []string{"us-east-1", "us-east-2"}, WitnessRegion: "us-west-2"}, "TableName"},
	} {
		err := (&Props{Code: AssetCode(placeholders), MultiRegion: &c.m}).Validate()
		if (c.want == "" && err != nil) || (c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want))) {
			t.Errorf("%+v: %v, want %q", c.m, err, c.want)
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "one of its Regions") {
			t.Errorf("a stack in eu-west-1: %v", r)
		}
	}()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	s := awscdk.NewStack(app, jsii.String("Elsewhere"), &awscdk.StackProps{Env: &awscdk.Environment{Region: jsii.String("us-west-2")}})
	m := twoAndWitness
	New(s, "ExactOnce", &Props{Code: AssetCode(placeholders), MultiRegion: &m})
}
