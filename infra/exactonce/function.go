package exactonce

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// Function sizing. Go handlers doing one DynamoDB call need little memory,
// but Lambda CPU scales with it: 256 MB keeps cold starts short and p99 low
// at a cost per ms that the ~10 ms invocations barely notice. The API
// timeout covers the SDK's retries of a throttled call (3 attempts with
// backoff) with margin and stays well under API Gateway's 30 s limit.
const (
	apiMemoryMB      = 256
	apiTimeout       = 10
	publisherMemory  = 256
	publisherTimeout = 60 // a stream batch of 100 records, PutEvents retries with backoff
	sweeperMemoryMB  = 256
	sweeperTimeout   = 60  // one sweep: its budget ends 10 s before this, the next run starts a minute later
	purgeTimeout     = 900 // MultiRegion: the sweeper also runs the daily purge, a Scan of the table (Lambda's limit)
	auditMemoryMB    = 128
	auditTimeout     = 10 // one event: a claim, a log line, a done write
	republishMemory  = 512
	republishTimeout = 900 // Lambda's limit: ~1-2 M items per run (segments in parallel); larger tables: one invocation per segment, or the command
	logRetention     = awslogs.RetentionDays_ONE_MONTH
)

// Reserved concurrency (Props.ReservedConcurrency), so API traffic, which
// can use the rest of the account's pool, never starves the event pipeline
// or expiry:
//   - publisher: Props.ReservedConcurrency. The mapping runs one invocation
//     per stream shard at a time (ParallelizationFactor 1, which keeps each
//     action's events in order). An on-demand table's stream has about one
//     shard per partition; RecommendedReservedConcurrency (20) covers a
//     table of 20 partitions (~20,000 writes/s sustained) with headroom. An
//     invocation refused for lack of concurrency is retried by the mapping:
//     a delay, not a loss.
//   - sweeper: one run a minute, and a run may overlap the next (timeout 60
//     s); SweeperReservedConcurrency lets that happen and no more.
//
// Each Region's quota must then be at least UnreservedMinimum + N +
// SweeperReservedConcurrency: AWS keeps UnreservedMinimum unreserved.
const (
	RecommendedReservedConcurrency = 20
	SweeperReservedConcurrency     = 2
	UnreservedMinimum              = 100
)

// The sweeper's asynchronous invocations (its schedules) are dropped once
// they are this old: a sweep that waited for a concurrency slot is
// worthless after the next minute's, and the daily purge is retried the
// next day (Lambda's default keeps them 6 hours).
const sweeperMaxEventAge = 2 * 60

// MaxEnvBytes is the total size of a function's environment variables that
// Lambda accepts; envTokenBytes is what a value known only at deploy (a
// table name, a queue URL, an ARN) is counted as.
const (
	MaxEnvBytes   = 4096
	envTokenBytes = 256
)

// MaxTenantsBytes is the largest tenant map, as JSON, that its SSM
// parameter holds (advanced tier: 8 KB).
const MaxTenantsBytes = 8192

// Function is one arm64 provided.al2023 Lambda with its own log group (JSON
// logs, one month) and its own role that may only write there; the part that
// uses it adds what else the function may do, statement by statement.
type Function struct {
	constructs.Construct
	// Name is the function's folder under functions/ ("create", …).
	Name     string
	Function awslambda.Function
	Role     awsiam.Role
	Logs     awslogs.LogGroup
}

// newFunction makes the Function name; its construct id is the name in
// title case ("Create"), its children Logs, Role and Function.
func newFunction(b *build, scope constructs.Construct, name string, env map[string]*string, memoryMB, timeoutS float64) *Function {
	f := &Function{Construct: b.part(scope, title(name), true), Name: name}
	f.Logs = awslogs.NewLogGroup(f.Construct, jsii.String("Logs"), &awslogs.LogGroupProps{Retention: logRetention, RemovalPolicy: b.removal})
	f.Role = awsiam.NewRole(f.Construct, jsii.String("Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("ExactOnce " + name + " function"),
	})
	f.Role.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents"),
		Resources: &[]*string{f.Logs.LogGroupArn()}, // the attribute already ends in :* (its streams)
	}))
	tracing := awslambda.Tracing_DISABLED
	if b.Tracing {
		tracing = awslambda.Tracing_ACTIVE
		cdknag.NagSuppressions_AddResourceSuppressions(f.Role, &[]*cdknag.NagPackSuppression{{
			Id:        jsii.String("AwsSolutions-IAM5"),
			Reason:    jsii.String("xray:PutTraceSegments and xray:PutTelemetryRecords do not support resource-level permissions; Lambda active tracing needs them on *."),
			AppliesTo: &[]interface{}{jsii.String("Resource::*")},
		}}, jsii.Bool(true))
	}
	if n := envBytes(env); n > MaxEnvBytes {
		panic(fmt.Sprintf("exactonce: function %s: its environment variables take about %d bytes (values known only at deploy counted as %d); Lambda accepts %d and the deploy would fail",
			name, n, envTokenBytes, MaxEnvBytes))
	}
	f.Function = awslambda.NewFunction(f.Construct, jsii.String("Function"), &awslambda.FunctionProps{
		Runtime:       awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:  awslambda.Architecture_ARM_64(),
		Handler:       jsii.String("bootstrap"),
		Code:          b.Code(name),
		MemorySize:    jsii.Number(memoryMB),
		Timeout:       awscdk.Duration_Seconds(jsii.Number(timeoutS)),
		Environment:   &env,
		Role:          f.Role,
		LogGroup:      f.Logs,
		LoggingFormat: awslambda.LoggingFormat_JSON,
		Tracing:       tracing,
		Description:   jsii.String("ExactOnce " + name),
	})
	return f
}

// allow adds one statement to the function's role.
func (f *Function) allow(actions []string, resources ...*string) {
	f.Function.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(actions...),
		Resources: &resources,
	}))
}

// envBytes is a function environment's size as Lambda counts it (keys and
// values), a value known only at deploy counted as envTokenBytes.
func envBytes(env map[string]*string) int {
	n := 0
	for k, v := range env {
		n += len(k)
		if v == nil {
			continue
		}
		if *awscdk.Token_IsUnresolved(v) {
			n += envTokenBytes
		} else {
			n += len(*v)
		}
	}
	return n
}

// reserve gives the function reserved concurrency.
func (f *Function) reserve(n float64) {
	f.Function.Node().DefaultChild().(awslambda.CfnFunction).SetReservedConcurrentExecutions(jsii.Number(n))
}
