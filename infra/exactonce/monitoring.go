package exactonce

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/exactonce/exactonce/shared/publish"
	"github.com/exactonce/exactonce/shared/telemetry"
)

// Monitoring is the alarms (docs/operating.md, "Alarms", says what each means and
// what to do), the topic that emails them (with Props.AlarmEmail), and the
// dashboard.
type Monitoring struct {
	constructs.Construct
	// Topic is nil without Props.AlarmEmail.
	Topic     awssns.Topic
	Alarms    []awscloudwatch.Alarm
	Dashboard awscloudwatch.Dashboard
	action    awscloudwatch.IAlarmAction
}

// iteratorAgeAlarmMs: events more than 3 minutes behind their writes.
const iteratorAgeAlarmMs = 180_000

func newMonitoring(b *build, scope constructs.Construct, e *ExactOnce) *Monitoring {
	m := &Monitoring{Construct: b.part(scope, "Monitoring", false)}
	if b.AlarmEmail != "" {
		m.Topic = awssns.NewTopic(m.Construct, jsii.String("Alarms"), &awssns.TopicProps{
			MasterKey:  awskms.Alias_FromAliasName(m.Construct, jsii.String("SnsKey"), jsii.String("alias/aws/sns")),
			EnforceSSL: jsii.Bool(true),
		})
		m.Topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(b.AlarmEmail), nil))
		m.action = awscloudwatchactions.NewSnsAction(m.Topic)
	}
	fiveMin := awscdk.Duration_Minutes(jsii.Number(5))
	sum := &awscloudwatch.MetricOptions{Period: fiveMin, Statistic: jsii.String("Sum")}
	max := &awscloudwatch.MetricOptions{Period: fiveMin, Statistic: jsii.String("Maximum")}

	for _, fn := range e.ApiPart.Functions {
		m.alarm(title(fn.Name)+"ErrorsAlarm", fn.Function.MetricErrors(sum), 1,
			"The "+fn.Name+" function failed (crash or timeout): see its log group")
	}

	// Events: publishing fails, events fall behind, something was set aside.
	publisher, onFailure := e.Events.Publisher.Function, e.Events.OnFailureQueue
	m.alarm("PublisherErrorsAlarm", publisher.MetricErrors(sum), 1,
		"The stream publisher failed (EventBridge not accepting events, or a crash): the batch is retried; see its log group")
	m.alarm("PublishFailuresAlarm", PublishFailuresMetric(fiveMin), 1,
		"EventBridge did not accept events (EntriesFailed): they are retried in order until the records are 23 h old; see the publisher's log")
	m.alarm("StreamIteratorAgeAlarm", publisher.Metric(jsii.String("IteratorAge"), max),
		iteratorAgeAlarmMs, "Events are published more than 3 minutes after their write: the publisher is failing, throttled or behind")
	m.alarm("OnFailureQueueAlarm", onFailure.MetricApproximateNumberOfMessagesVisible(max),
		1, "Something was set aside: a stream record that cannot be read, or records 23 h old never published. Their events were NOT published: fix, then republish the window")
	m.alarm("Api5xxAlarm", e.Api.MetricServerError(sum), 1,
		"The API answered 5xx: DynamoDB unavailable (503) or a function failure")
	m.alarm("SweeperErrorsAlarm", e.Expiry.Sweeper.Function.MetricErrors(sum), 3,
		"The expiry sweeper failed in 3+ runs out of 5: action.expired events are late; see its log group")
	if s := e.Subscriber; s != nil {
		m.alarm("AuditErrorsAlarm", s.Function.Function.MetricErrors(sum), 1,
			"The audit subscriber failed on an event (it is retried); see its log group")
		m.alarm("AuditDeadLettersAlarm", s.DeadLetters.MetricApproximateNumberOfMessagesVisible(max),
			1, "Events the audit subscriber never handled: inspect the queue and redrive them")
	}
	m.Dashboard = m.dashboard(e)
	return m
}

// alarm: metric ≥ threshold in one 5-minute period; no data is fine.
func (m *Monitoring) alarm(id string, metric awscloudwatch.IMetric, threshold float64, what string) {
	a := awscloudwatch.NewAlarm(m.Construct, jsii.String(id), &awscloudwatch.AlarmProps{
		Metric:             metric,
		Threshold:          jsii.Number(threshold),
		EvaluationPeriods:  jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		AlarmDescription:   jsii.String(what),
	})
	if m.action != nil {
		a.AddAlarmAction(m.action)
	}
	m.Alarms = append(m.Alarms, a)
}

// PublishFailuresMetric is the metric the publisher emits when EventBridge
// did not accept entries (publish.MetricEntriesFailed), as the alarm reads it.
func PublishFailuresMetric(period awscdk.Duration) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(telemetry.Namespace),
		MetricName:    jsii.String(publish.MetricEntriesFailed),
		DimensionsMap: &map[string]*string{publish.DimFunction: jsii.String(publish.FunctionName)},
		Statistic:     jsii.String("Sum"),
		Period:        period,
	})
}

// dashboard shows, without reading code, what ExactOnce is doing: outcomes
// and latency per route (from the EMF metrics the functions print), API
// errors, and the health of the event pipeline and of expiry.
func (m *Monitoring) dashboard(e *ExactOnce) awscloudwatch.Dashboard {
	api, publisher, onFailure := e.Api, e.Events.Publisher.Function, e.Events.OnFailureQueue
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
			DimensionsMap: &map[string]*string{publish.DimFunction: jsii.String(fn)},
			Statistic:     jsii.String(stat), Period: minute, Label: jsii.String(metric),
		})
	}
	graph := func(title string, width float64, left ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Width: jsii.Number(width), Height: jsii.Number(6), Left: &left,
		})
	}
	stat := func(metric func(*awscloudwatch.MetricOptions) awscloudwatch.Metric, s string) awscloudwatch.IMetric {
		return metric(&awscloudwatch.MetricOptions{Period: minute, Statistic: jsii.String(s)})
	}
	d := awscloudwatch.NewDashboard(m.Construct, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
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
		graph("Events published / retried / not accepted; records reported / set aside", 8,
			own(publish.MetricEventsPublished, "Sum", publish.FunctionName), own(publish.MetricEntriesRetried, "Sum", publish.FunctionName),
			own(publish.MetricEntriesFailed, "Sum", publish.FunctionName), own(publish.MetricBatchItemFailures, "Sum", publish.FunctionName),
			own(publish.MetricRecordsSetAside, "Sum", publish.FunctionName)),
		graph("Stream iterator age (ms) and on-failure queue", 8,
			publisher.Metric(jsii.String("IteratorAge"), &awscloudwatch.MetricOptions{Period: minute, Statistic: jsii.String("Maximum")}),
			stat(onFailure.MetricApproximateNumberOfMessagesVisible, "Maximum")),
		graph("Expiry: lag (ms), actions expired, sweep duration (ms)", 8,
			own("ExpiryLag", "Maximum", "sweeper"), own("ActionsExpired", "Sum", "sweeper"), own("SweepDuration", "Maximum", "sweeper")),
	)
	return d
}
