package exactonce_test

import (
	"fmt"

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

// A shop's CDK app embeds ExactOnce next to its own resources: its checkout
// service may consume actions (and call nothing else), its queue gets the
// action.consumed events, its pager every ExactOnce alarm. The functions'
// code is in dist/lambda, written by exactonce.BuildFunctions.
func Example() {
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

	eo.AddOutputs(stack) // ApiUrl, TableName, EventBusName, …

	template := app.Synth(nil).GetStackByName(stack.StackName()).Template().(map[string]any)
	fmt.Println(len(eo.Functions), "functions,", len(eo.Alarms), "alarms,", len(template["Outputs"].(map[string]any)), "outputs")
	// Output: 15 functions, 18 alarms, 7 outputs
}
