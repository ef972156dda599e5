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
	// PurgeSchedule runs the sweeper's purge once a day (Props.MultiRegion
	// only: MRSC has no TTL): one conditional DeleteItem per item whose
	// retention ("ttl") has passed. Nil in a single Region.
	PurgeSchedule awsevents.Rule
}

func newExpiry(b *build, scope constructs.Construct, table *Table) *Expiry {
	x := &Expiry{Construct: b.part(scope, "Expiry", false)}
	timeout := float64(sweeperTimeout)
	if b.MultiRegion != nil {
		timeout = purgeTimeout
	}
	x.Sweeper = newFunction(b, x.Construct, "sweeper", b.tableEnv(table.Ref), sweeperMemoryMB, timeout)
	if b.ReservedConcurrency > 0 {
		x.Sweeper.reserve(SweeperReservedConcurrency)
	}
	x.Sweeper.allow([]string{"dynamodb:Query"}, table.ExpiryIndexArn)
	// GetItem/UpdateItem: its watermarks and Expire; BatchGetItem: skip finished actions.
	x.Sweeper.allow([]string{"dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:BatchGetItem"}, table.Ref.TableArn())
	x.Schedule = awsevents.NewRule(x.Construct, jsii.String("SweepSchedule"), &awsevents.RuleProps{
		Description: jsii.String("Runs the ExactOnce expiry sweeper every minute"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(1))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(x.Sweeper.Function, &awseventstargets.LambdaFunctionProps{
			RetryAttempts: jsii.Number(0), // the next minute's run is the retry
		})},
	})
	x.Sweeper.Function.ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{RetryAttempts: jsii.Number(0),
		MaxEventAge: awscdk.Duration_Seconds(jsii.Number(sweeperMaxEventAge))})
	if b.MultiRegion != nil {
		// Safe in every Region at once: each delete is conditional on the
		// item's ttl having passed, so a second Region's delete of the same
		// item changes nothing, and an item whose ttl moved on is kept.
		x.Sweeper.allow([]string{"dynamodb:Scan", "dynamodb:DeleteItem"}, table.Ref.TableArn())
		x.PurgeSchedule = awsevents.NewRule(x.Construct, jsii.String("PurgeSchedule"), &awsevents.RuleProps{
			Description: jsii.String("Runs the ExactOnce purge once a day: deletes items past their retention (MRSC tables have no TTL)"),
			Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Days(jsii.Number(1))),
			Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(x.Sweeper.Function, &awseventstargets.LambdaFunctionProps{
				Event:         awsevents.RuleTargetInput_FromObject(map[string]any{"purge": true}),
				RetryAttempts: jsii.Number(0), // the next day's run is the retry
			})},
		})
	}
	return x
}
