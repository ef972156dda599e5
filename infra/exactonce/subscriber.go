package exactonce

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdadestinations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/events/once"
	"github.com/exactonce/exactonce/infra/idemtable"
)

// ExampleSubscriber is the audit subscriber (functions/audit): a rule on the
// bus for the three event types invokes it asynchronously; it claims each
// eventId in its own table (events/once), so a redelivered event is logged
// once. Events it still fails on after Lambda's retries, or that
// EventBridge cannot deliver, land in a dead-letter queue.
type ExampleSubscriber struct {
	constructs.Construct
	Claims      awsdynamodb.Table
	DeadLetters awssqs.Queue
	Function    *Function
	Rule        awsevents.Rule
}

func newExampleSubscriber(b *build, scope constructs.Construct, bus awsevents.EventBus) *ExampleSubscriber {
	s := &ExampleSubscriber{Construct: b.part(scope, "ExampleSubscriber", false)}
	// The claims table of events/once: the idempotency library's table.
	s.Claims = idemtable.New(s.Construct, "AuditClaims", &idemtable.Props{PartitionKey: once.PartitionKey, Keep: !b.Throwaway})
	s.DeadLetters = deadLetterQueue(b, s.Construct, "AuditDeadLetters", "the dead-letter queue of the audit subscriber (rule target and async on-failure)")

	s.Function = newFunction(b, s.Construct, "audit", map[string]*string{"DEDUPE_TABLE": s.Claims.TableName(), "EVENT_SOURCE": jsii.String(b.EventSource)}, auditMemoryMB, auditTimeout)
	s.Function.allow([]string{"dynamodb:UpdateItem"}, s.Claims.TableArn()) // each claim, done and release is one UpdateItem
	// Lambda retries a failed event twice (about 1 and 3 minutes later),
	// time enough for a concurrent delivery's claim to finish or lapse.
	s.Function.Function.ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{
		RetryAttempts: jsii.Number(2),
		MaxEventAge:   awscdk.Duration_Hours(jsii.Number(6)),
		OnFailure:     awslambdadestinations.NewSqsDestination(s.DeadLetters),
	})
	s.Rule = awsevents.NewRule(s.Construct, jsii.String("AuditRule"), &awsevents.RuleProps{
		EventBus:     bus,
		Description:  jsii.String("ExactOnce events to the example audit subscriber"),
		EventPattern: subscriberPattern(b),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(s.Function.Function, &awseventstargets.LambdaFunctionProps{
			DeadLetterQueue: s.DeadLetters,
			RetryAttempts:   jsii.Number(185),
			MaxEventAge:     awscdk.Duration_Hours(jsii.Number(24)),
		})},
	})
	if b.StackLogicalIds {
		// The rule's target names its statement in the dead-letter queue's
		// policy after the rule's unique id (from its path): keep the
		// standalone stack's. Statement 0 is EnforceSSL's.
		rule := *s.Rule.Node().Path()
		s.DeadLetters.Node().FindChild(jsii.String("Policy")).Node().DefaultChild().(awscdk.CfnResource).
			AddPropertyOverride(jsii.String("PolicyDocument.Statement.1.Sid"), "AllowEventRule"+b.ids.uniqueID(rule))
	}
	return s
}

// subscriberPattern is the example subscriber's rule: ExactOnce's events,
// of one tenant when ExampleSubscriberTenant is set (detail.tenant; events
// of the default tenant carry none).
func subscriberPattern(b *build) *awsevents.EventPattern {
	p := &awsevents.EventPattern{
		Source:     jsii.Strings(b.EventSource),
		DetailType: jsii.Strings(events.Types...),
	}
	if b.ExampleSubscriberTenant != "" {
		p.Detail = &map[string]any{"tenant": []string{b.ExampleSubscriberTenant}}
	}
	return p
}
