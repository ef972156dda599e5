// Command shop is a CDK app in Go that embeds ExactOnce next to its own
// resources: its checkout service may consume actions (and call nothing
// else), its queue gets the action.consumed events, its pager every
// ExactOnce alarm. docs/cdk-construct.md shows this file whole, and
// TestHostModule (infra/exactonce) runs it as a user does: from a module of
// its own, with the page's cdk.json, through `cdk synth`.
package main

import (
	"log"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/infra/exactonce"
)

func main() {
	// First the functions: ExactOnce's 16 Lambdas built for linux/arm64
	// into dist/lambda/<name>/bootstrap (add "xray" after the folder for
	// Props.Tracing), before the stack refers to them as assets.
	if err := exactonce.BuildFunctions(".", "dist/lambda"); err != nil {
		log.Fatal(err)
	}
	// The CDK runs in a jsii runtime (a Node.js process): end it when main returns.
	defer jsii.Close()

	app := awscdk.NewApp(nil)
	stack := awscdk.NewStack(app, jsii.String("Shop"), nil)

	eo := exactonce.New(stack, "Actions", &exactonce.Props{
		Code:        exactonce.AssetCode("dist/lambda"),
		EventSource: "shop.actions",
		Tenants:     map[string][]string{"checkout": {"arn:aws:iam::*:role/Shop-Checkout*"}},
	})

	checkout := awsiam.NewRole(stack, jsii.String("Checkout"), &awsiam.RoleProps{
		AssumedBy: awsiam.NewServicePrincipal(jsii.String("ecs-tasks.amazonaws.com"), nil),
	})
	eo.GrantInvoke(checkout, "consume") // execute-api:Invoke on POST /actions/*/consume only

	consumed := awssqs.NewQueue(stack, jsii.String("Consumed"), &awssqs.QueueProps{EnforceSSL: jsii.Bool(true)})
	awsevents.NewRule(stack, jsii.String("ConsumedToQueue"), &awsevents.RuleProps{
		EventBus:     eo.Bus,
		EventPattern: eo.EventPattern(events.TypeConsumed),
		Targets:      &[]awsevents.IRuleTarget{awseventstargets.NewSqsQueue(consumed, nil)},
	})

	pager := awssns.NewTopic(stack, jsii.String("Pager"), nil)
	eo.AddAlarmAction(awscloudwatchactions.NewSnsAction(pager))

	eo.AddOutputs(stack) // ApiUrl, ApiId, TableName, EventBusName, …

	app.Synth(nil) // cdk.out/Shop.template.json and the assets, for cdk synth / cdk deploy
}
