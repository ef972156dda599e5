package main

import (
	"strconv"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdadestinations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/telemetry"
)

// Settings are the stack's options, read from CDK context by settingsFrom.
type Settings struct {
	// Throwaway relaxes deletion protection and RETAIN, for test stages.
	Throwaway bool
	// Auth is "iam" (SigV4, the default) or "jwt" (JwtIssuer, JwtAudience).
	Auth        string
	JwtIssuer   string
	JwtAudience []string
	// AlarmEmail, when set, subscribes an email to every alarm.
	AlarmEmail string
	// EventSource is the "source" of the published events.
	EventSource string
	// ExpiryShards partitions the expiry index (0: store.DefaultExpiryShards).
	ExpiryShards int
	// ExampleSubscriber deploys the audit subscriber (functions/audit), its
	// claims table and rule: a working example of consuming the events.
	ExampleSubscriber bool
	// Tracing turns on X-Ray active tracing for every function; Code must
	// then hold builds with the xray tag (shared/tracing).
	Tracing bool
	// Code returns the asset folder holding the bootstrap binary of a function.
	Code func(name string) string
}

// Route is an HTTP route served by one function.
type Route struct {
	Function string
	Method   awsapigatewayv2.HttpMethod
	Path     string
	// Table actions the function calls; nothing else on the table is allowed.
	TableActions []string
	// Secret reports whether the function reads the server secret.
	Secret bool
	// KeysOnly confines the function to idempotency-key items (partition
	// keys starting with store.KeyPrefix) with the dynamodb:LeadingKeys
	// condition: the /keys functions cannot read or write an action.
	KeysOnly bool
}

// Routes are the API's routes: one function each, least privilege each.
var Routes = []Route{
	{"create", awsapigatewayv2.HttpMethod_POST, "/actions", []string{"dynamodb:UpdateItem"}, true, false},
	{"get", awsapigatewayv2.HttpMethod_GET, "/actions/{actionId}", []string{"dynamodb:GetItem"}, false, false},
	{"consume", awsapigatewayv2.HttpMethod_POST, "/actions/{actionId}/consume", []string{"dynamodb:UpdateItem"}, true, false},
	{"cancel", awsapigatewayv2.HttpMethod_POST, "/actions/{actionId}/cancel", []string{"dynamodb:UpdateItem"}, true, false},
	{"keyclaim", awsapigatewayv2.HttpMethod_POST, "/keys/{key}/claim", []string{"dynamodb:UpdateItem"}, true, true},
	{"keycomplete", awsapigatewayv2.HttpMethod_POST, "/keys/{key}/complete", []string{"dynamodb:UpdateItem"}, true, true},
	{"keyrelease", awsapigatewayv2.HttpMethod_POST, "/keys/{key}/release", []string{"dynamodb:UpdateItem"}, true, true},
	{"keyget", awsapigatewayv2.HttpMethod_GET, "/keys/{key}", []string{"dynamodb:GetItem"}, true, true},
}

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
	sweeperTimeout   = 60 // one sweep: its budget ends 10 s before this, the next run starts a minute later
	auditMemoryMB    = 128
	auditTimeout     = 10 // one event: a claim, a log line, a done write
	logRetention     = awslogs.RetentionDays_ONE_MONTH
)

// NewStack defines the whole ExactOnce deployment.
func NewStack(scope constructs.Construct, id string, props *awscdk.StackProps, s Settings) awscdk.Stack {
	stack := awscdk.NewStack(scope, &id, props)
	removal := awscdk.RemovalPolicy_RETAIN
	if s.Throwaway {
		removal = awscdk.RemovalPolicy_DESTROY
	}

	table := awsdynamodb.NewTable(stack, jsii.String("Actions"), &awsdynamodb.TableProps{
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String("actionId"), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String("ttl"),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Stream:             awsdynamodb.StreamViewType_NEW_AND_OLD_IMAGES,
		Encryption:         awsdynamodb.TableEncryption_AWS_MANAGED,
		DeletionProtection: jsii.Bool(!s.Throwaway),
		RemovalPolicy:      removal,
	})

	// Sparse: only open actions carry expShard, so the index holds exactly
	// the actions the sweeper may have to expire.
	table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:      jsii.String(store.ExpiryIndex),
		PartitionKey:   &awsdynamodb.Attribute{Name: jsii.String("expShard"), Type: awsdynamodb.AttributeType_STRING},
		SortKey:        &awsdynamodb.Attribute{Name: jsii.String("expiresAtMs"), Type: awsdynamodb.AttributeType_NUMBER},
		ProjectionType: awsdynamodb.ProjectionType_KEYS_ONLY,
	})
	shards := s.ExpiryShards
	if shards <= 0 {
		shards = store.DefaultExpiryShards
	}

	secret := awssecretsmanager.NewSecret(stack, jsii.String("ServerSecret"), &awssecretsmanager.SecretProps{
		Description: jsii.String("ExactOnce server secret: PIN HMAC and payload encryption keys are derived from it"),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength:     jsii.Number(64),
			ExcludePunctuation: jsii.Bool(true),
		},
		RemovalPolicy: removal,
	})
	cdknag.NagSuppressions_AddResourceSuppressions(secret, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-SMG4"),
		Reason: jsii.String("Rotating the server secret needs the old value kept beside the new one ({\"current\",\"previous\"}) " +
			"so sealed payloads and PIN hashes stay usable; a single-value rotation Lambda would break them. Rotation is a documented manual step."),
	}}, jsii.Bool(false))

	env := map[string]*string{
		"TABLE_NAME":     table.TableName(),
		config.EnvShards: jsii.String(strconv.Itoa(shards)),
	}

	// The HTTP API: IAM (SigV4) on every route unless JWT is chosen.
	var authorizer awsapigatewayv2.IHttpRouteAuthorizer = awsapigatewayv2authorizers.NewHttpIamAuthorizer()
	if s.Auth == "jwt" {
		aud := make([]*string, len(s.JwtAudience))
		for i, a := range s.JwtAudience {
			aud[i] = jsii.String(a)
		}
		authorizer = awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("Jwt"), jsii.String(s.JwtIssuer),
			&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{JwtAudience: &aud})
	}
	api := awsapigatewayv2.NewHttpApi(stack, jsii.String("Api"), &awsapigatewayv2.HttpApiProps{
		Description:       jsii.String("ExactOnce actions API"),
		DefaultAuthorizer: authorizer,
	})
	accessLogs := awslogs.NewLogGroup(stack, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention: logRetention, RemovalPolicy: removal,
	})
	stage := api.DefaultStage().Node().DefaultChild().(awsapigatewayv2.CfnStage)
	stage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: accessLogs.LogGroupArn(),
		Format: jsii.String(`{"requestId":"$context.requestId","ip":"$context.identity.sourceIp","caller":"$context.identity.caller",` +
			`"requestTime":"$context.requestTime","routeKey":"$context.routeKey","status":"$context.status",` +
			`"latencyMs":"$context.responseLatency","integrationLatencyMs":"$context.integrationLatency",` +
			`"integrationError":"$context.integrationErrorMessage","responseLength":"$context.responseLength"}`),
	})
	stage.SetDefaultRouteSettings(&awsapigatewayv2.CfnStage_RouteSettingsProperty{
		ThrottlingRateLimit:  jsii.Number(1000),
		ThrottlingBurstLimit: jsii.Number(2000),
	})

	var alarmAction awscloudwatch.IAlarmAction
	if s.AlarmEmail != "" {
		topic := awssns.NewTopic(stack, jsii.String("Alarms"), &awssns.TopicProps{
			MasterKey:  awskms.Alias_FromAliasName(stack, jsii.String("SnsKey"), jsii.String("alias/aws/sns")),
			EnforceSSL: jsii.Bool(true),
		})
		topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(s.AlarmEmail), nil))
		alarmAction = awscloudwatchactions.NewSnsAction(topic)
	}
	alarm := func(id string, metric awscloudwatch.IMetric, threshold float64, what string) {
		a := awscloudwatch.NewAlarm(stack, jsii.String(id), &awscloudwatch.AlarmProps{
			Metric:             metric,
			Threshold:          jsii.Number(threshold),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
			AlarmDescription:   jsii.String(what),
		})
		if alarmAction != nil {
			a.AddAlarmAction(alarmAction)
		}
	}
	fiveMin := awscdk.Duration_Minutes(jsii.Number(5))

	for _, r := range Routes {
		fnEnv := map[string]*string{}
		for k, v := range env {
			fnEnv[k] = v
		}
		if r.Secret {
			fnEnv["EXACTONCE_SECRET_ARN"] = secret.SecretArn()
		}
		fn := newFunction(stack, r.Function, s, fnEnv, apiMemoryMB, apiTimeout, removal)
		tableAccess := &awsiam.PolicyStatementProps{
			Actions:   jsii.Strings(r.TableActions...),
			Resources: &[]*string{table.TableArn()},
		}
		if r.KeysOnly {
			tableAccess.Conditions = &map[string]any{
				"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": []string{store.KeyPrefix + "*"}},
			}
		}
		fn.AddToRolePolicy(awsiam.NewPolicyStatement(tableAccess))
		if r.Secret {
			fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Actions:   jsii.Strings("secretsmanager:GetSecretValue"),
				Resources: &[]*string{secret.SecretArn()},
			}))
		}
		api.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{r.Method},
			Integration: awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(title(r.Function)+"Integration"), fn, nil),
		})
		alarm(title(r.Function)+"ErrorsAlarm", fn.MetricErrors(&awscloudwatch.MetricOptions{Period: fiveMin, Statistic: jsii.String("Sum")}), 1,
			"The "+r.Function+" function failed (crash or timeout): see its log group")
	}

	// Events: stream → publisher → custom bus; what cannot be published after
	// the retries lands on the on-failure queue.
	bus := awsevents.NewEventBus(stack, jsii.String("Bus"), &awsevents.EventBusProps{
		Description: jsii.String("ExactOnce action events: action.consumed, action.canceled, action.expired"),
	})
	onFailure := deadLetterQueue(stack, "PublisherOnFailure", "the on-failure destination (DLQ) of the stream publisher", removal)

	publisher := newFunction(stack, "publisher", s, map[string]*string{
		"EVENT_BUS_NAME": bus.EventBusName(),
		"EVENT_SOURCE":   jsii.String(s.EventSource),
	}, publisherMemory, publisherTimeout, removal)
	publisher.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("events:PutEvents"),
		Resources: &[]*string{bus.EventBusArn()},
	}))
	publisher.AddEventSource(awslambdaeventsources.NewDynamoEventSource(table, &awslambdaeventsources.DynamoEventSourceProps{
		StartingPosition:        awslambda.StartingPosition_TRIM_HORIZON,
		BatchSize:               jsii.Number(100),
		BisectBatchOnError:      jsii.Bool(true),
		RetryAttempts:           jsii.Number(10),
		MaxRecordAge:            awscdk.Duration_Hours(jsii.Number(24)),
		ReportBatchItemFailures: jsii.Bool(true),
		OnFailure:               awslambdaeventsources.NewSqsDlq(onFailure),
	}))
	cdknag.NagSuppressions_AddResourceSuppressions(publisher.Role(), &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-IAM5"),
		Reason: jsii.String("dynamodb:ListStreams cannot be scoped to a resource, and the stream ARN's label is only known at deploy time " +
			"(Resource::<ActionsTable...StreamArn>); both come from the DynamoDB event source mapping grant."),
		AppliesTo: &[]interface{}{jsii.String("Resource::*")},
	}}, jsii.Bool(true))
	alarm("PublisherErrorsAlarm", publisher.MetricErrors(&awscloudwatch.MetricOptions{Period: fiveMin, Statistic: jsii.String("Sum")}), 1,
		"The stream publisher failed: events are being retried; see its log group")
	alarm("StreamIteratorAgeAlarm", publisher.Metric(jsii.String("IteratorAge"), &awscloudwatch.MetricOptions{Period: fiveMin, Statistic: jsii.String("Maximum")}),
		60_000, "Events are published more than a minute after their write: the publisher is falling behind or failing")
	alarm("OnFailureQueueAlarm", onFailure.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Period: fiveMin, Statistic: jsii.String("Maximum")}),
		1, "Stream records gave up after every retry: their events were NOT published; inspect the queue and replay them")
	alarm("Api5xxAlarm", api.MetricServerError(&awscloudwatch.MetricOptions{Period: fiveMin, Statistic: jsii.String("Sum")}), 1,
		"The API answered 5xx: DynamoDB unavailable (503) or a function failure")

	// The sweeper: every minute, expire what is due (Query on the index,
	// one UpdateItem per action), so action.expired follows expiresAt
	// within about a minute; TTL only cleans up afterwards.
	sweeper := newFunction(stack, "sweeper", s, env, sweeperMemoryMB, sweeperTimeout, removal)
	sweeper.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("dynamodb:Query"),
		Resources: &[]*string{jsii.String(*table.TableArn() + "/index/" + store.ExpiryIndex)},
	}))
	sweeper.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		// GetItem/UpdateItem: its watermarks and Expire; BatchGetItem: skip finished actions.
		Actions:   jsii.Strings("dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:BatchGetItem"),
		Resources: &[]*string{table.TableArn()},
	}))
	awsevents.NewRule(stack, jsii.String("SweepSchedule"), &awsevents.RuleProps{
		Description: jsii.String("Runs the ExactOnce expiry sweeper every minute"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(1))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(sweeper, &awseventstargets.LambdaFunctionProps{
			RetryAttempts: jsii.Number(0), // the next minute's run is the retry
		})},
	})
	sweeper.ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{RetryAttempts: jsii.Number(0)})
	alarm("SweeperErrorsAlarm", sweeper.MetricErrors(&awscloudwatch.MetricOptions{Period: fiveMin, Statistic: jsii.String("Sum")}), 3,
		"The expiry sweeper failed in 3+ runs out of 5: action.expired events are late; see its log group")

	dashboard(stack, api, publisher, onFailure)

	if s.ExampleSubscriber {
		exampleSubscriber(stack, s, bus, alarm, removal)
	}

	out := func(id string, v *string, what string) {
		awscdk.NewCfnOutput(stack, jsii.String(id), &awscdk.CfnOutputProps{Value: v, Description: jsii.String(what)})
	}
	out("ApiUrl", api.ApiEndpoint(), "HTTPS endpoint of the actions API")
	out("TableName", table.TableName(), "DynamoDB table of actions")
	out("EventBusName", bus.EventBusName(), "EventBridge bus the events are published on")
	out("EventBusArn", bus.EventBusArn(), "ARN of the event bus")
	out("OnFailureQueueUrl", onFailure.QueueUrl(), "SQS queue of stream records that could not be published")
	return stack
}

// dashboard shows, without reading code, what ExactOnce is doing: outcomes
// and latency per route (from the EMF metrics the functions print), API
// errors, and the health of the event pipeline and of expiry.
func dashboard(stack awscdk.Stack, api awsapigatewayv2.HttpApi, publisher awslambda.Function, onFailure awssqs.Queue) {
	minute := awscdk.Duration_Minutes(jsii.Number(1))
	search := func(label, dims, metric, stat string) awscloudwatch.IMetric {
		return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression: jsii.String("SEARCH('{" + telemetry.Namespace + "," + dims + `} MetricName="` + metric + `"', '` + stat + "', 60)"),
			Label:      jsii.String(label),
			Period:     minute,
		})
	}
	own := func(metric, stat, fn string) awscloudwatch.IMetric {
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace: jsii.String(telemetry.Namespace), MetricName: jsii.String(metric),
			DimensionsMap: &map[string]*string{"Function": jsii.String(fn)},
			Statistic:     jsii.String(stat), Period: minute, Label: jsii.String(metric),
		})
	}
	graph := func(title string, width float64, left ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Width: jsii.Number(width), Height: jsii.Number(6), Left: &left,
		})
	}
	stat := func(m func(*awscloudwatch.MetricOptions) awscloudwatch.Metric, s string) awscloudwatch.IMetric {
		return m(&awscloudwatch.MetricOptions{Period: minute, Statistic: jsii.String(s)})
	}
	d := awscloudwatch.NewDashboard(stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
	})
	d.AddWidgets(
		graph("Requests by route and outcome", 24, search("", "Route,Outcome", "Requests", "Sum")),
	)
	d.AddWidgets(
		graph("Latency p50 by route (ms)", 8, search("p50", "Route", "Latency", "p50")),
		graph("Latency p99 by route (ms)", 8, search("p99", "Route", "Latency", "p99")),
		graph("API 4xx / 5xx", 8, stat(api.MetricClientError, "Sum"), stat(api.MetricServerError, "Sum")),
	)
	d.AddWidgets(
		graph("Events published / retried / batch failures", 8,
			own("EventsPublished", "Sum", "publisher"), own("EntriesRetried", "Sum", "publisher"), own("BatchItemFailures", "Sum", "publisher")),
		graph("Stream iterator age (ms) and on-failure queue", 8,
			publisher.Metric(jsii.String("IteratorAge"), &awscloudwatch.MetricOptions{Period: minute, Statistic: jsii.String("Maximum")}),
			stat(onFailure.MetricApproximateNumberOfMessagesVisible, "Maximum")),
		graph("Expiry: lag (ms), actions expired, sweep duration (ms)", 8,
			own("ExpiryLag", "Maximum", "sweeper"), own("ActionsExpired", "Sum", "sweeper"), own("SweepDuration", "Maximum", "sweeper")),
	)
}

// exampleSubscriber wires the audit subscriber: a rule on the bus for the
// three event types invokes it asynchronously; it claims each eventId in its
// own table (events/once), so a redelivered event is logged once. Events it
// still fails on after Lambda's retries, or that EventBridge cannot deliver,
// land in a dead-letter queue.
func exampleSubscriber(stack awscdk.Stack, s Settings, bus awsevents.EventBus, alarm func(string, awscloudwatch.IMetric, float64, string), removal awscdk.RemovalPolicy) {
	claims := awsdynamodb.NewTable(stack, jsii.String("AuditClaims"), &awsdynamodb.TableProps{
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String("eventId"), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String("ttl"),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:         awsdynamodb.TableEncryption_AWS_MANAGED,
		DeletionProtection: jsii.Bool(!s.Throwaway),
		RemovalPolicy:      removal,
	})
	deadLetters := deadLetterQueue(stack, "AuditDeadLetters", "the dead-letter queue of the audit subscriber (rule target and async on-failure)", removal)

	fn := newFunction(stack, "audit", s, map[string]*string{"DEDUPE_TABLE": claims.TableName()}, auditMemoryMB, auditTimeout, removal)
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"),
		Resources: &[]*string{claims.TableArn()},
	}))
	// Lambda retries a failed event twice (about 1 and 3 minutes later),
	// time enough for a concurrent delivery's claim to finish or lapse.
	fn.ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{
		RetryAttempts: jsii.Number(2),
		MaxEventAge:   awscdk.Duration_Hours(jsii.Number(6)),
		OnFailure:     awslambdadestinations.NewSqsDestination(deadLetters),
	})
	awsevents.NewRule(stack, jsii.String("AuditRule"), &awsevents.RuleProps{
		EventBus:    bus,
		Description: jsii.String("ExactOnce events to the example audit subscriber"),
		EventPattern: &awsevents.EventPattern{
			Source:     jsii.Strings(s.EventSource),
			DetailType: jsii.Strings(events.TypeConsumed, events.TypeCanceled, events.TypeExpired),
		},
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(fn, &awseventstargets.LambdaFunctionProps{
			DeadLetterQueue: deadLetters,
			RetryAttempts:   jsii.Number(185),
			MaxEventAge:     awscdk.Duration_Hours(jsii.Number(24)),
		})},
	})
	alarm("AuditErrorsAlarm", fn.MetricErrors(&awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Sum")}), 1,
		"The audit subscriber failed on an event (it is retried); see its log group")
	alarm("AuditDeadLettersAlarm", deadLetters.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Maximum")}),
		1, "Events the audit subscriber never handled: inspect the queue and redrive them")
	awscdk.NewCfnOutput(stack, jsii.String("AuditClaimsTableName"), &awscdk.CfnOutputProps{
		Value: claims.TableName(), Description: jsii.String("Claims of the example audit subscriber (events/once)"),
	})
}

// deadLetterQueue makes an encrypted, SSL-only queue kept 14 days that is
// itself a dead-letter queue (what, for cdk-nag's reason), so it has none.
func deadLetterQueue(stack awscdk.Stack, id, what string, removal awscdk.RemovalPolicy) awssqs.Queue {
	q := awssqs.NewQueue(stack, jsii.String(id), &awssqs.QueueProps{
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
		RemovalPolicy:   removal,
	})
	cdknag.NagSuppressions_AddResourceSuppressions(q, &[]*cdknag.NagPackSuppression{{
		Id:     jsii.String("AwsSolutions-SQS3"),
		Reason: jsii.String("This queue is itself " + what + "; a DLQ of a DLQ adds nothing."),
	}}, jsii.Bool(false))
	return q
}

// newFunction makes one arm64 provided.al2023 function with its own log
// group (JSON logs, retention) and its own role that may only write there.
func newFunction(stack awscdk.Stack, name string, s Settings, env map[string]*string, memoryMB, timeoutS float64, removal awscdk.RemovalPolicy) awslambda.Function {
	id := title(name)
	logs := awslogs.NewLogGroup(stack, jsii.String(id+"Logs"), &awslogs.LogGroupProps{Retention: logRetention, RemovalPolicy: removal})
	role := awsiam.NewRole(stack, jsii.String(id+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("ExactOnce " + name + " function"),
	})
	role.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents"),
		Resources: &[]*string{logs.LogGroupArn()}, // the attribute already ends in :* (its streams)
	}))
	tracing := awslambda.Tracing_DISABLED
	if s.Tracing {
		tracing = awslambda.Tracing_ACTIVE
		cdknag.NagSuppressions_AddResourceSuppressions(role, &[]*cdknag.NagPackSuppression{{
			Id:        jsii.String("AwsSolutions-IAM5"),
			Reason:    jsii.String("xray:PutTraceSegments and xray:PutTelemetryRecords do not support resource-level permissions; Lambda active tracing needs them on *."),
			AppliesTo: &[]interface{}{jsii.String("Resource::*")},
		}}, jsii.Bool(true))
	}
	return awslambda.NewFunction(stack, jsii.String(id+"Function"), &awslambda.FunctionProps{
		Runtime:       awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:  awslambda.Architecture_ARM_64(),
		Handler:       jsii.String("bootstrap"),
		Code:          awslambda.Code_FromAsset(jsii.String(s.Code(name)), nil),
		MemorySize:    jsii.Number(memoryMB),
		Timeout:       awscdk.Duration_Seconds(jsii.Number(timeoutS)),
		Environment:   &env,
		Role:          role,
		LogGroup:      logs,
		LoggingFormat: awslambda.LoggingFormat_JSON,
		Tracing:       tracing,
		Description:   jsii.String("ExactOnce " + name),
	})
}

func title(s string) string { return string(s[0]-'a'+'A') + s[1:] }
