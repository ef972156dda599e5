package exactonce

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Expiry is the sweeper and its schedule: every minute, expire what is due
// (Query on the expiry index, one UpdateItem per action), so action.expired
// follows expiresAt within about a minute; TTL only cleans up afterwards.
type Expiry struct {
	constructs.Construct
	Sweeper  *Function
	Schedule awsevents.Rule
}

func newExpiry(b *build, scope constructs.Construct, table *Table) *Expiry {
	x := &Expiry{Construct: b.part(scope, "Expiry", false)}
	x.Sweeper = newFunction(b, x.Construct, "sweeper", b.tableEnv(table.Table), sweeperMemoryMB, sweeperTimeout)
	x.Sweeper.reserve(sweeperReservedConcurrency)
	x.Sweeper.allow([]string{"dynamodb:Query"}, table.ExpiryIndexArn)
	// GetItem/UpdateItem: its watermarks and Expire; BatchGetItem: skip finished actions.
	x.Sweeper.allow([]string{"dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:BatchGetItem"}, table.Table.TableArn())
	x.Schedule = awsevents.NewRule(x.Construct, jsii.String("SweepSchedule"), &awsevents.RuleProps{
		Description: jsii.String("Runs the ExactOnce expiry sweeper every minute"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(1))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(x.Sweeper.Function, &awseventstargets.LambdaFunctionProps{
			RetryAttempts: jsii.Number(0), // the next minute's run is the retry
		})},
	})
	x.Sweeper.Function.ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{RetryAttempts: jsii.Number(0)})
	return x
}
