// Package exactonce is ExactOnce as an AWS CDK construct: the actions table,
// the HTTP API and its functions, the event pipeline (stream publisher, bus,
// republish), expiry (the sweeper) and the dashboard and alarms, for a Go CDK
// app to embed next to its own resources and wire further: grant a role a
// route (GrantInvoke), add rules to the bus (Bus, EventPattern), add alarm
// actions (AddAlarmAction).
//
// The standalone app in infra/ is a thin layer on top of New. Inside, one
// small construct per job, each in the file its name says:
//
//	Table            table.go      the actions table and its expiry index
//	Api              api.go        the HTTP API, its access logs, one Function per route
//	Function         function.go   one Lambda with its log group and its own role
//	EventPipeline    events.go     bus, bus policy, on-failure queue, publisher, republish
//	Expiry           expiry.go     the sweeper and its schedule
//	Monitoring       monitoring.go the alarms (and their topic) and the dashboard
//	ExampleSubscriber subscriber.go the audit subscriber, its claims table and rule
package exactonce

import (
	"encoding/json"
	"fmt"
	"net/mail"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/tenant"
)

// Auth is how the API authenticates callers.
type Auth string

const (
	// AuthIAM is SigV4 on every route: callers need execute-api:Invoke
	// (GrantInvoke). The default.
	AuthIAM Auth = "iam"
	// AuthJWT is a JWT authorizer (Props.JwtIssuer, Props.JwtAudience); each
	// route also needs its scope (httpapi.RouteScope).
	AuthJWT Auth = "jwt"
)

// Props configure an ExactOnce. The zero value plus Code is the default
// deployment (IAM auth, source "exactonce", 16 expiry shards, no tenants).
// Each field is the typed form of a context option of the standalone app
// (infra/main.go), named in brackets.
type Props struct {
	// Code gives each function's code by name (see Functions), e.g.
	// AssetCode(dir) after BuildFunctions(moduleDir, dir). Required.
	Code func(name string) awslambda.Code
	// Throwaway relaxes deletion protection and RETAIN, for test stages
	// (exactonce:throwaway).
	Throwaway bool
	// Auth is AuthIAM ("" means AuthIAM) or AuthJWT (exactonce:auth).
	Auth Auth
	// JwtIssuer and JwtAudience configure AuthJWT (exactonce:jwtIssuer,
	// exactonce:jwtAudience).
	JwtIssuer   string
	JwtAudience []string
	// AlarmEmail, when set, subscribes an email to every alarm through an
	// SNS topic (AlarmTopic) (exactonce:alarmEmail). AddAlarmAction adds
	// other actions.
	AlarmEmail string
	// EventSource is the "source" of the published events; "" means
	// "exactonce" (exactonce:eventSource).
	EventSource string
	// ExpiryShards partitions the expiry index; 0 means
	// store.DefaultExpiryShards. Only ever raise it (exactonce:expiryShards).
	ExpiryShards int
	// ExampleSubscriber deploys the audit subscriber (functions/audit), its
	// claims table and rule (exactonce:exampleSubscriber).
	ExampleSubscriber bool
	// ExampleSubscriberTenant, when set, makes the example subscriber's rule
	// take only that tenant's events (exactonce:exampleSubscriberTenant).
	ExampleSubscriberTenant string
	// Tracing turns on X-Ray active tracing for every function; Code must
	// then give builds with the xray tag (exactonce:tracing).
	Tracing bool
	// Tenants is the tenant map, tenant → principal patterns (see
	// shared/tenant); nil means one default tenant (exactonce:tenants).
	Tenants map[string][]string
	// TenantClaim is the JWT claim matched against the map; "" means sub
	// (exactonce:tenantClaim).
	TenantClaim string
	// MultiRegion, when set, deploys this Region's part of a multi-Region
	// ExactOnce on one MRSC global table (exactonce:regions,
	// exactonce:witnessRegion); nil is a single-Region table.
	MultiRegion *MultiRegion
	// ReservedConcurrency, when above 0, reserves that many concurrent
	// executions for the stream publisher (one per stream shard; 20 covers a
	// table of ~20 partitions) and SweeperReservedConcurrency for the sweeper,
	// so API traffic can never starve them. 0 (the default) reserves none:
	// a deploy then needs no quota beyond AWS's defaults. With N, the
	// Region's concurrency quota must be at least
	// UnreservedMinimum + N + SweeperReservedConcurrency (AWS keeps 100
	// unreserved; a new account's quota is often 10): the deploy fails and
	// rolls back otherwise (exactonce:reservedConcurrency, "off" or N).
	ReservedConcurrency int
	// StackLogicalIds gives every resource the logical id it has in the
	// standalone ExactOnce stack, as if it were created directly in the
	// stack and not under this construct and its parts. Set it where a stack
	// deployed by infra/ before must keep its resources (a new logical id
	// replaces a resource: an empty table, a new server secret). Only one
	// ExactOnce per stack then. A new embedding leaves it false.
	StackLogicalIds bool
}

// Validate reports the first invalid prop.
func (p *Props) Validate() error {
	if p.Code == nil {
		return fmt.Errorf("exactonce: Props.Code is required")
	}
	switch p.Auth {
	case "", AuthIAM:
	case AuthJWT:
		if p.JwtIssuer == "" || len(p.JwtAudience) == 0 {
			return fmt.Errorf("exactonce: AuthJWT needs JwtIssuer and JwtAudience")
		}
		// API Gateway reads the issuer's keys by OpenID Connect discovery,
		// whose issuer is an https URL without query or fragment.
		if u, err := url.Parse(p.JwtIssuer); !unresolved(p.JwtIssuer) && (err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "") {
			return fmt.Errorf("exactonce: JwtIssuer must be the issuer's https URL, as its tokens' iss says it, not %q", p.JwtIssuer)
		}
		for i, a := range p.JwtAudience {
			if !unresolved(a) && (a == "" || strings.TrimSpace(a) != a) {
				return fmt.Errorf("exactonce: JwtAudience[%d] is %q: an audience is a token's aud (or client_id) as it is, not empty and without spaces around it", i, a)
			}
		}
	default:
		return fmt.Errorf("exactonce: Auth must be %q or %q, not %q", AuthIAM, AuthJWT, p.Auth)
	}
	// EventBridge's PutEvents takes a source of 1 to 256 characters, and
	// "aws." names AWS services: every event would be refused.
	if !unresolved(p.EventSource) && (len(p.EventSource) > 256 || strings.HasPrefix(p.EventSource, "aws.")) {
		return fmt.Errorf("exactonce: EventSource must be at most 256 characters and not start with \"aws.\" (EventBridge keeps those for AWS services), not %q", p.EventSource)
	}
	if p.AlarmEmail != "" && !unresolved(p.AlarmEmail) {
		if a, err := mail.ParseAddress(p.AlarmEmail); err != nil || a.Address != p.AlarmEmail {
			return fmt.Errorf("exactonce: AlarmEmail must be one email address (name@example.com), not %q", p.AlarmEmail)
		}
	}
	if p.Tenants != nil && len(p.Tenants) == 0 {
		return fmt.Errorf("exactonce: Tenants is empty, which places no caller (every call would be 403): leave it out for one default tenant")
	}
	if t := p.ExampleSubscriberTenant; t != "" {
		if !p.ExampleSubscriber {
			return fmt.Errorf("exactonce: ExampleSubscriberTenant %q needs ExampleSubscriber", t)
		}
		if _, ok := p.Tenants[t]; !ok {
			return fmt.Errorf("exactonce: ExampleSubscriberTenant %q is not a tenant of Tenants: the subscriber's rule would match no event", t)
		}
	}
	if p.ExpiryShards < 0 || p.ExpiryShards > 1000 {
		return fmt.Errorf("exactonce: ExpiryShards must be from 1 to 1000 (0: the default), not %d", p.ExpiryShards)
	}
	if p.Tenants != nil {
		if _, err := tenant.Parse(p.tenantsJSON()); err != nil {
			return fmt.Errorf("exactonce: Tenants: %w", err)
		}
		if n := len(p.tenantsJSON()); n > MaxTenantsBytes {
			return fmt.Errorf("exactonce: Tenants: the tenant map takes %d bytes as JSON; the SSM parameter that holds it takes at most %d (advanced tier): "+
				"name roles by wildcard patterns (one pattern can cover many roles) or split the tenants across stacks", n, MaxTenantsBytes)
		}
	}
	if p.ReservedConcurrency < 0 {
		return fmt.Errorf("exactonce: ReservedConcurrency must be 0 (none) or a number of concurrent executions, not %d", p.ReservedConcurrency)
	}
	if p.MultiRegion != nil {
		return p.MultiRegion.Validate()
	}
	return nil
}

// unresolved reports whether s holds a CDK token (a parameter, another
// resource's attribute): its value is known only at deploy time, so a
// check of its text would refuse what may be right.
func unresolved(s string) bool { return *awscdk.Token_IsUnresolved(s) }

func (p *Props) tenantsJSON() string {
	if p.Tenants == nil {
		return ""
	}
	b, err := json.Marshal(p.Tenants)
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return string(b)
}

// ExactOnce is the whole service. Its fields are for the host app to wire
// further; the parts hold everything else.
type ExactOnce struct {
	constructs.Construct

	// Table is the actions table (stream: NEW_AND_OLD_IMAGES); nil with
	// Props.MultiRegion (see RegionTable, TablePart.Global).
	Table awsdynamodb.Table
	// RegionTable is the table this Region's functions use: Table, or with
	// Props.MultiRegion this Region's replica of the global table.
	RegionTable awsdynamodb.ITable
	// Secret is the server secret (PIN HMAC and payload keys derive from it);
	// with Props.MultiRegion only in the first Region's stack, which
	// replicates it to the others (see RegionSecret).
	Secret awssecretsmanager.Secret
	// RegionSecret is the secret this Region's functions read: Secret, or
	// with Props.MultiRegion this Region's replica of it.
	RegionSecret awssecretsmanager.ISecret
	// Api is the HTTP API; ApiUrl its endpoint.
	Api awsapigatewayv2.HttpApi
	// Bus is the event bus the events are published on.
	Bus awsevents.EventBus
	// OnFailureQueue holds stream records that could not be published.
	OnFailureQueue awssqs.Queue
	// Functions are the Lambdas by name (see Functions).
	Functions map[string]awslambda.Function
	// AlarmTopic is the topic of Props.AlarmEmail; nil without it.
	AlarmTopic awssns.Topic
	// Alarms are every alarm ExactOnce defines.
	Alarms []awscloudwatch.Alarm

	// The parts.
	TablePart  *Table
	ApiPart    *Api
	Events     *EventPipeline
	Expiry     *Expiry
	Monitoring *Monitoring
	// Subscriber is nil without Props.ExampleSubscriber.
	Subscriber *ExampleSubscriber

	source string
}

// build is what every part is built from: the props with defaults filled.
type build struct {
	Props
	removal awscdk.RemovalPolicy
	shards  int
	ids     *logicalIds
}

// part makes a construct grouping one job's resources. In StackLogicalIds
// mode its id is left out of its children's logical ids (merge: put in
// front of each child's id instead, as a Function's "Create" + "Logs").
func (b *build) part(scope constructs.Construct, id string, merge bool) constructs.Construct {
	c := constructs.NewConstruct(scope, jsii.String(id))
	b.ids.transparent(c, merge)
	return c
}

// New defines ExactOnce under scope. It panics on invalid props (see
// Props.Validate), as CDK constructs do.
func New(scope constructs.Construct, id string, props *Props) *ExactOnce {
	p := Props{}
	if props != nil {
		p = *props
	}
	if err := p.Validate(); err != nil {
		panic(err)
	}
	if p.Auth == "" {
		p.Auth = AuthIAM
	}
	if p.EventSource == "" {
		p.EventSource = "exactonce"
	}
	b := &build{Props: p, removal: awscdk.RemovalPolicy_RETAIN, shards: p.ExpiryShards, ids: &logicalIds{}}
	if p.Throwaway {
		b.removal = awscdk.RemovalPolicy_DESTROY
	}
	if b.shards <= 0 {
		b.shards = store.DefaultExpiryShards
	}

	root := b.part(scope, id, false)
	e := &ExactOnce{Construct: root, Functions: map[string]awslambda.Function{}, source: p.EventSource}

	e.TablePart = newTable(b, root)
	e.Table, e.RegionTable = e.TablePart.Table, e.TablePart.Ref
	var secret secretRef
	e.Secret, e.RegionSecret, secret = newServerSecret(b, root)
	e.ApiPart = newApi(b, root, e.RegionTable, secret)
	e.Api = e.ApiPart.Api
	e.Events = newEventPipeline(b, root, e.RegionTable)
	e.Bus, e.OnFailureQueue = e.Events.Bus, e.Events.OnFailureQueue
	e.Expiry = newExpiry(b, root, e.TablePart)
	if p.ExampleSubscriber {
		e.Subscriber = newExampleSubscriber(b, root, e.Bus)
	}
	for _, f := range e.functions() {
		e.Functions[f.Name] = f.Function
	}
	e.Monitoring = newMonitoring(b, root, e)
	e.AlarmTopic, e.Alarms = e.Monitoring.Topic, e.Monitoring.Alarms

	if p.StackLogicalIds {
		b.ids.flatten(root)
	}
	return e
}

// functions lists the parts' functions in Functions order.
func (e *ExactOnce) functions() []*Function {
	fns := slices.Clone(e.ApiPart.Functions)
	fns = append(fns, e.Events.Publisher, e.Expiry.Sweeper, e.Events.Republish)
	if e.Subscriber != nil {
		fns = append(fns, e.Subscriber.Function)
	}
	return fns
}

// secretRef is how a function names the server secret (EXACTONCE_SECRET_ARN:
// its ARN, or the name of a replica) and what its policy allows.
type secretRef struct{ id, policyArn *string }

// newServerSecret is the server secret: PIN HMAC and payload encryption
// keys are derived from it. With MultiRegion every Region must hold the same
// secret (an action's PIN and payload are checked and opened in whichever
// Region a caller reaches): the first Region's stack creates it, named
// after the table, replicated by Secrets Manager to the other Regions, whose
// stacks refer to their replica by name (the returned Secret is then nil).
func newServerSecret(b *build, scope constructs.Construct) (awssecretsmanager.Secret, awssecretsmanager.ISecret, secretRef) {
	props := &awssecretsmanager.SecretProps{
		Description: jsii.String("ExactOnce server secret: PIN HMAC and payload encryption keys are derived from it"),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength:     jsii.Number(64),
			ExcludePunctuation: jsii.Bool(true),
		},
		RemovalPolicy: b.removal,
	}
	if m := b.MultiRegion; m != nil {
		name := jsii.String(m.TableName + "/server")
		if stack := awscdk.Stack_Of(scope); *stack.Region() != m.Regions[0] {
			// A replica keeps the name and the random suffix of the ARN.
			arn := stack.FormatArn(&awscdk.ArnComponents{Service: jsii.String("secretsmanager"), Resource: jsii.String("secret"),
				ResourceName: jsii.String(*name + "-??????"), ArnFormat: awscdk.ArnFormat_COLON_RESOURCE_NAME})
			return nil, awssecretsmanager.Secret_FromSecretNameV2(scope, jsii.String("ServerSecret"), name), secretRef{name, arn}
		}
		props.SecretName = name
		replicas := []*awssecretsmanager.ReplicaRegion{}
		for _, r := range m.Regions[1:] {
			replicas = append(replicas, &awssecretsmanager.ReplicaRegion{Region: jsii.String(r)})
		}
		props.ReplicaRegions = &replicas
	}
	secret := awssecretsmanager.NewSecret(scope, jsii.String("ServerSecret"), props)
	cdknag.NagSuppressions_AddResourceSuppressions(secret, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-SMG4"),
		Reason: jsii.String("Rotating the server secret needs the old value kept beside the new one ({\"current\",\"previous\"}) " +
			"so sealed payloads and PIN hashes stay usable; a single-value rotation Lambda would break them. Rotation is a documented manual step."),
	}}, jsii.Bool(false))
	return secret, secret, secretRef{secret.SecretArn(), secret.SecretArn()}
}

// GrantInvoke lets grantee call one route, named by its function (see
// Routes: "create", "get", "consume", "cancel", "keyclaim", "keycomplete",
// "keyrelease", "keyget", "userlist", "usercancel"): execute-api:Invoke on that
// route's ARN, api/<any stage>/METHOD/path with each path parameter a *,
// and nothing else. Only with AuthIAM; with AuthJWT a caller needs a token
// with the route's scope.
//
// (Not HttpRoute.GrantInvoke: the CDK's route ARN replaces everything from
// the first path parameter on, so a grant of POST /actions/{actionId}/consume
// would also allow POST /actions/{actionId}/cancel.)
func (e *ExactOnce) GrantInvoke(grantee awsiam.IGrantable, route string) awsiam.Grant {
	return awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee:      grantee,
		Actions:      jsii.Strings("execute-api:Invoke"),
		ResourceArns: jsii.Strings(*e.RouteArn(route)),
	})
}

// RouteArn is the execute-api ARN of one route (see GrantInvoke), for a
// policy the host writes itself.
func (e *ExactOnce) RouteArn(route string) *string {
	i := slices.IndexFunc(Routes, func(r Route) bool { return r.Function == route })
	if i < 0 {
		names := make([]string, len(Routes))
		for i, r := range Routes {
			names[i] = r.Function
		}
		panic(fmt.Sprintf("exactonce: no route %q (routes are named by their function: %s)", route, strings.Join(names, ", ")))
	}
	if e.ApiPart.auth != AuthIAM {
		panic("exactonce: GrantInvoke needs AuthIAM; with AuthJWT give the caller a token with the route's scope")
	}
	r := Routes[i]
	path := pathParam.ReplaceAllString(r.Path, "*")
	return awscdk.Stack_Of(e.Api).FormatArn(&awscdk.ArnComponents{
		Service:      jsii.String("execute-api"),
		Resource:     e.Api.ApiId(),
		ResourceName: jsii.String("*/" + string(r.Method) + path),
		ArnFormat:    awscdk.ArnFormat_SLASH_RESOURCE_NAME,
	})
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// AddAlarmAction adds actions to every alarm (on top of AlarmEmail's topic).
func (e *ExactOnce) AddAlarmAction(actions ...awscloudwatch.IAlarmAction) {
	for _, a := range e.Alarms {
		a.AddAlarmAction(actions...)
	}
}

// EventPattern matches ExactOnce's events of the given detail types
// (events.TypeConsumed, …; none: every type), for a rule on Bus.
func (e *ExactOnce) EventPattern(detailTypes ...string) *awsevents.EventPattern {
	if len(detailTypes) == 0 {
		detailTypes = events.Types
	}
	return &awsevents.EventPattern{Source: jsii.Strings(e.source), DetailType: jsii.Strings(detailTypes...)}
}

// AddOutputs defines the standalone stack's outputs in scope (give it the
// stack: the outputs are then named ApiUrl, ApiId, TableName, EventBusName,
// EventBusArn, OnFailureQueueUrl, RepublishFunctionName, and
// AuditClaimsTableName with the example subscriber).
func (e *ExactOnce) AddOutputs(scope constructs.Construct) {
	out := func(id string, v *string, what string) {
		awscdk.NewCfnOutput(scope, jsii.String(id), &awscdk.CfnOutputProps{Value: v, Description: jsii.String(what)})
	}
	out("ApiUrl", e.Api.ApiEndpoint(), "HTTPS endpoint of the actions API")
	out("ApiId", e.Api.ApiId(), "Id of the actions API, for callers' execute-api:Invoke policies (arn:aws:execute-api:REGION:ACCOUNT:ApiId/*)")
	out("TableName", e.RegionTable.TableName(), "DynamoDB table of actions")
	out("EventBusName", e.Bus.EventBusName(), "EventBridge bus the events are published on")
	out("EventBusArn", e.Bus.EventBusArn(), "ARN of the event bus")
	out("OnFailureQueueUrl", e.OnFailureQueue.QueueUrl(), "SQS queue of stream records that could not be published")
	out("RepublishFunctionName", e.Functions["republish"].FunctionName(), "Lambda that republishes a time window's events from the table")
	if e.Subscriber != nil {
		out("AuditClaimsTableName", e.Subscriber.Claims.TableName(), "Claims of the example audit subscriber (events/once)")
	}
}

// tableEnv is what every function that reads or writes actions gets.
func (b *build) tableEnv(table awsdynamodb.ITable) map[string]*string {
	return map[string]*string{
		"TABLE_NAME":     table.TableName(),
		config.EnvShards: jsii.String(strconv.Itoa(b.shards)),
	}
}

func title(s string) string { return string(s[0]-'a'+'A') + s[1:] }
