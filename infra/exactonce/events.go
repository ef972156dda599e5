package exactonce

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/exactonce/exactonce/shared/publish"
)

// EventPipeline is how events leave ExactOnce: the table's stream → the
// publisher → the custom bus. What cannot be published within the records'
// age limit, and stream records that cannot be read, land on the on-failure
// queue; the republish function rebuilds a window's events from the table;
// the bus policy lets only those two functions publish ExactOnce's source.
type EventPipeline struct {
	constructs.Construct
	Bus            awsevents.EventBus
	OnFailureQueue awssqs.Queue
	Publisher      *Function
	Republish      *Function
}

func newEventPipeline(b *build, scope constructs.Construct, table awsdynamodb.ITable) *EventPipeline {
	p := &EventPipeline{Construct: b.part(scope, "Events", false)}
	var name *string // the CDK names a bus by its unique id (Names.uniqueId), from its path
	if b.StackLogicalIds {
		name = jsii.String(b.ids.uniqueID(*p.Node().Path() + "/Bus"))
	}
	p.Bus = awsevents.NewEventBus(p.Construct, jsii.String("Bus"), &awsevents.EventBusProps{
		EventBusName: name,
		Description:  jsii.String("ExactOnce action events: action.consumed, action.canceled, action.expired"),
	})
	p.OnFailureQueue = deadLetterQueue(b, p.Construct, "PublisherOnFailure", "the on-failure destination (DLQ) of the stream publisher")
	p.Publisher = eventPublisher(b, p.Construct, table, p.Bus, p.OnFailureQueue)
	p.Republish = republishFunction(b, p.Construct, table, p.Bus)
	onlyOurFunctionsPublish(p.Bus, b.EventSource, p.Publisher.Role, p.Republish.Role)
	return p
}

// eventPublisher is the stream publisher and its event source mapping.
//
// The mapping retries without limit (MaximumRetryAttempts -1) until a
// record is publish.MappingMaxRecordAge (23 h) old: when EventBridge fails,
// the publisher returns a function error and the same batch is retried, in
// order, so an outage up to the stream's 24 h retention is only a delay.
// Poison records do not need the mapping's retry limit: the publisher
// reports only such a record, publishes everything else, and sets it aside
// itself after a few reports. BisectBatchOnFunctionError stays off: a
// function error here means "EventBridge is failing", never "a record is
// bad", so halving the batch would only shrink batches during an outage.
// The filter keeps idempotency-key items (key#…, which carry no userId)
// from invoking the publisher at all: only action images have userId (a
// string; an item with another type of userId, which the API never writes,
// is filtered out too and left to republish, which reports it).
func eventPublisher(b *build, scope constructs.Construct, table awsdynamodb.ITable, bus awsevents.EventBus, onFailure awssqs.Queue) *Function {
	publisher := newFunction(b, scope, "publisher", map[string]*string{
		"EVENT_BUS_NAME":       bus.EventBusName(),
		"EVENT_SOURCE":         jsii.String(b.EventSource),
		"ON_FAILURE_QUEUE_URL": onFailure.QueueUrl(),
	}, publisherMemory, publisherTimeout)
	if b.ReservedConcurrency > 0 {
		publisher.reserve(float64(b.ReservedConcurrency))
	}
	publisher.allow([]string{"events:PutEvents"}, bus.EventBusArn())
	hasUserID := func(image string) *map[string]any {
		return awslambda.FilterCriteria_Filter(&map[string]any{
			"dynamodb": map[string]any{image: map[string]any{"userId": map[string]any{"S": awslambda.FilterRule_Exists()}}},
		})
	}
	source := awslambdaeventsources.NewDynamoEventSource(table, &awslambdaeventsources.DynamoEventSourceProps{
		StartingPosition:        awslambda.StartingPosition_TRIM_HORIZON,
		BatchSize:               jsii.Number(100),
		BisectBatchOnError:      jsii.Bool(false),
		MaxRecordAge:            awscdk.Duration_Seconds(jsii.Number(publish.MappingMaxRecordAge.Seconds())),
		ReportBatchItemFailures: jsii.Bool(true),
		OnFailure:               awslambdaeventsources.NewSqsDlq(onFailure),
		Filters:                 &[]*map[string]any{hasUserID("NewImage"), hasUserID("OldImage")},
	})
	publisher.Function.AddEventSource(source)
	// CDK accepts retryAttempts 0..10000 only; -1 (until the record age
	// limit) is CloudFormation's own value for "no limit".
	mapping := publisher.Function.Node().FindChild(jsii.String("DynamoDBEventSource:" + *awscdk.Names_NodeUniqueId(table.Node())))
	mapping.Node().DefaultChild().(awslambda.CfnEventSourceMapping).AddPropertyOverride(jsii.String("MaximumRetryAttempts"), publish.MappingRetryAttempts)
	cdknag.NagSuppressions_AddResourceSuppressions(publisher.Role, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-IAM5"),
		Reason: jsii.String("dynamodb:ListStreams cannot be scoped to a resource, and the stream ARN's label is only known at deploy time " +
			"(Resource::<ActionsTable...StreamArn>); both come from the DynamoDB event source mapping grant."),
		AppliesTo: &[]interface{}{jsii.String("Resource::*")},
	}}, jsii.Bool(true))
	return publisher
}

// republishFunction is the Lambda an operator invokes to rebuild a time
// window's events from the table (functions/republish): a parallel Scan of
// the table and PutEvents on the bus, nothing else.
func republishFunction(b *build, scope constructs.Construct, table awsdynamodb.ITable, bus awsevents.EventBus) *Function {
	fn := newFunction(b, scope, "republish", map[string]*string{
		"TABLE_NAME":     table.TableName(),
		"EVENT_BUS_NAME": bus.EventBusName(),
		"EVENT_SOURCE":   jsii.String(b.EventSource),
	}, republishMemory, republishTimeout)
	fn.allow([]string{"dynamodb:Scan"}, table.TableArn())
	fn.allow([]string{"events:PutEvents"}, bus.EventBusArn())
	return fn
}

// onlyOurFunctionsPublish is the bus's resource policy: a PutEvents entry
// with ExactOnce's source is denied to every principal but the publisher's
// and the republish function's roles (same-account identity policies
// included: an explicit deny wins). Subscribers' events.Parse also refuses
// any other source.
func onlyOurFunctionsPublish(bus awsevents.EventBus, source string, roles ...awsiam.IRole) {
	arns := make([]*string, len(roles))
	for i, r := range roles {
		arns[i] = r.RoleArn()
	}
	bus.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("OnlyExactOncePublishesItsSource"),
		Effect:     awsiam.Effect_DENY,
		Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
		Actions:    jsii.Strings("events:PutEvents"),
		Resources:  &[]*string{bus.EventBusArn()},
		Conditions: &map[string]any{
			// events:source is multivalued (ArrayOfString in the Service
			// Authorization Reference): a plain StringEquals on it never
			// matches, so the deny would never apply; ForAnyValue does.
			"ForAnyValue:StringEquals": map[string]any{"events:source": source},
			"ArnNotEquals":             map[string]any{"aws:PrincipalArn": arns},
		},
	}))
}

// deadLetterQueue makes an encrypted, SSL-only queue kept 14 days that is
// itself a dead-letter queue (what, for cdk-nag's reason), so it has none.
func deadLetterQueue(b *build, scope constructs.Construct, id, what string) awssqs.Queue {
	q := awssqs.NewQueue(scope, jsii.String(id), &awssqs.QueueProps{
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
		RemovalPolicy:   b.removal,
	})
	cdknag.NagSuppressions_AddResourceSuppressions(q, &[]*cdknag.NagPackSuppression{{
		Id:     jsii.String("AwsSolutions-SQS3"),
		Reason: jsii.String("This queue is itself " + what + "; a DLQ of a DLQ adds nothing."),
	}}, jsii.Bool(false))
	return q
}
