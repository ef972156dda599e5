// Package emulator runs a synthesized ExactOnce template on this machine as
// the template defines it: every function as its own process under a local
// Lambda Runtime API with exactly the template's environment (plus the SDK's
// own AWS_ENDPOINT_URL_<SERVICE> variables and the credentials of its role),
// every AWS call authorized against its role's policies (e2e/iam), the
// HTTP API's routes and integrations, the stream's event source mapping
// (filters, batch size, partial batch failures, retries, on-failure
// destination) and the bus's rules. A stack with an environment runs in
// its own Region, after what the stacks it depends on create there (a
// replica Region's stack: the first Region's global table and secret have
// replicas in its Region, which it names), and its custom resources' calls
// are made as their providers' roles (the replica's DescribeTable of its
// table, whose stream ARN its publisher reads).
package emulator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"quamina.net/go/quamina"

	"github.com/exactonce/exactonce/e2e/iam"
	"github.com/exactonce/exactonce/e2e/template"
	"github.com/exactonce/exactonce/local/awsfake"
	"github.com/exactonce/exactonce/local/dynamodblocal"
	"github.com/exactonce/exactonce/local/eventbus"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/local/gateway"
	"github.com/exactonce/exactonce/local/lambdaruntime"
	"github.com/exactonce/exactonce/local/streams"
	"github.com/exactonce/exactonce/shared/awsconfig"
)

// Options configure Start.
type Options struct {
	Template string // path of the synthesized template
	Root     string // the repository (.tools/)
	// Callers maps an access key id of an API caller to its principal ARN
	// (the IAM authorizer's answer for a SigV4 signature with that key).
	Callers map[string]string
	Log     *slog.Logger
}

// Deployment is the running stack.
type Deployment struct {
	Stack    *template.Stack
	Names    *template.Names
	Region   string // the template's (template.DefaultRegion when it has none)
	URL      string // the HTTP API
	DB       *dynamodb.Client
	Fake     *awsfake.Server
	Bus      *eventbus.Bus
	BusFault *faults.Proxy // between the functions and the bus
	Proxy    *iam.Proxy
	fns      map[string]*lambdaruntime.Function
	creds    map[string]aws.Credentials // function → its role's keys
	xray     map[string]*xrayDaemon     // traced function → its X-Ray daemon
	tables   map[string]template.Table  // by name: the template's and the replicas made for it

	clockAhead atomic.Int64 // the mappings' clock runs this far ahead (ns)
	ttl        sync.Map     // partition key → deleted by ExpireByTTL

	mu         sync.Mutex
	routeHits  map[string]int
	deliveries []Delivery
	failures   []string

	stop    []func()
	cancel  context.CancelFunc
	bg      sync.WaitGroup
	ruleQ   map[string]chan []byte // target function → events, in order
	log     *slog.Logger
	started time.Time
}

// Delivery is one event a rule delivered to a target.
type Delivery struct {
	Rule, Target string
	Event        []byte
	Err          error
}

// Start brings the stack up.
func Start(ctx context.Context, o Options) (_ *Deployment, err error) {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := &Deployment{fns: map[string]*lambdaruntime.Function{}, xray: map[string]*xrayDaemon{}, creds: map[string]aws.Credentials{}, ruleQ: map[string]chan []byte{}, log: o.Log, started: time.Now()}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	tpl, err := template.Load(o.Template)
	if err != nil {
		return nil, err
	}
	names := template.LocalNames(tpl)
	d.Names, d.Region = names, names.Region()
	// What Lambda would refuse or fail to run shows before anything starts:
	// each function's code, runtime, handler and architecture.
	code, pre, launch, err := checkFunctions(tpl, names)
	if err != nil {
		return nil, err
	}
	// What the stacks this one depends on create for it in its Region (a
	// replica Region's table and secret, created by the first Region's).
	replicaTables, secrets, err := template.Replicated(tpl)
	if err != nil {
		return nil, err
	}
	for _, id := range tpl.OfType("AWS::SecretsManager::Secret") {
		secrets = append(secrets, names.Refs[id])
	}

	ddb, err := dynamodblocal.Start(ctx, dynamodblocal.Options{})
	if err != nil {
		return nil, err
	}
	d.stop = append(d.stop, ddb.Stop)
	d.DB = dynamodb.NewFromConfig(awsconfig.Local(ddb.Endpoint))
	partitionKeys := map[string]string{}
	d.tables = map[string]template.Table{}
	for _, id := range append(tpl.OfType("AWS::DynamoDB::Table"), tpl.OfType("AWS::DynamoDB::GlobalTable")...) {
		streamArn, err := createTable(ctx, d.DB, names.Refs[id], tpl.Resources[id].Properties, partitionKeys)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", id, err)
		}
		if streamArn != "" {
			names.Attrs[id]["StreamArn"] = streamArn
		}
		d.tables[names.Refs[id]] = template.Table{LogicalID: id, Name: names.Refs[id], Properties: tpl.Resources[id].Properties}
	}
	for _, t := range replicaTables {
		if _, err := createTable(ctx, d.DB, t.Name, t.Properties, partitionKeys); err != nil {
			return nil, fmt.Errorf("table %s (%s's replica in %s): %w", t.Name, t.LogicalID, d.Region, err)
		}
		d.tables[t.Name] = t
	}

	if d.Fake, err = awsfake.New(); err != nil {
		return nil, err
	}
	d.stop = append(d.stop, func() { _ = d.Fake.Close() })
	if d.Bus, err = eventbus.New(io.Discard); err != nil {
		return nil, err
	}
	d.stop = append(d.stop, func() { _ = d.Bus.Close() })
	if d.BusFault, err = faults.Start(d.Bus.URL, faults.Rates{}, 1); err != nil {
		return nil, err
	}
	d.stop = append(d.stop, d.BusFault.Close)

	eval, err := iam.StartEvaluator(filepath.Join(o.Root, ".tools"))
	if err != nil {
		return nil, err
	}
	d.stop = append(d.stop, eval.Close)
	d.Proxy = &iam.Proxy{Eval: eval, Keys: map[string]*iam.Principal{}, PartitionKeys: partitionKeys,
		ResourcePolicies: map[string]any{}, Region: d.Region, Account: template.Account, Secrets: secrets, Client: &http.Client{Timeout: 30 * time.Second},
		Backends: map[string]string{iam.DynamoDB: ddb.Endpoint, iam.Streams: ddb.Endpoint, iam.Events: d.BusFault.URL,
			iam.SQS: d.Fake.URL, iam.SecretsManager: d.Fake.URL, iam.SSM: d.Fake.URL}}
	d.Proxy.Slow = func(call string, took time.Duration) {
		o.Log.Warn("slow AWS call", "call", call, "took", took.String())
	}
	proxyURL, stopProxy, err := serve(d.Proxy)
	if err != nil {
		return nil, err
	}
	d.stop = append(d.stop, stopProxy)

	// Custom resources, as CloudFormation creates them: their calls, as
	// their providers' roles, through the proxy; their answers are what
	// the template's Fn::GetAtt of them read.
	for _, c := range pre.CustomResources {
		if err := d.createCustomResource(ctx, c, pre.Providers[c.Provider], proxyURL); err != nil {
			return nil, err
		}
	}
	if d.Stack, err = template.Model(tpl, names); err != nil {
		return nil, err
	}
	for _, q := range d.Stack.Queues {
		d.Fake.AddQueue(q.Name)
	}
	for _, arn := range secrets {
		d.Fake.PutSecret(arn, randomText(64))
	}
	for name, v := range d.Stack.Parameters {
		d.Fake.PutParameter(name, v)
	}
	for arn, b := range d.Stack.Buses {
		if b.Policy != nil {
			d.Proxy.ResourcePolicies[arn] = b.Policy
		}
	}

	// Start every function of the template from its own code asset, as
	// Lambda runs it (runtime, handler, architecture, memory, timeout,
	// tracing): what cdk deploy ships, not a build of this checkout.
	var fnames []string
	for name := range d.Stack.Functions {
		fnames = append(fnames, name)
	}
	sort.Strings(fnames)
	d.stop = append(d.stop, func() { _ = os.RemoveAll(code) })
	for _, name := range fnames {
		f := d.Stack.Functions[name]
		def, argv := launch[name].def, launch[name].argv
		dir := def.CodeDir
		key := "AKIAE2E" + strings.ToUpper(name)
		creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: randomText(40), SessionToken: "e2e-" + name}
		d.creds[name] = creds
		d.Proxy.Keys[key] = &iam.Principal{Function: name, RoleArn: f.RoleArn, Statements: statements(f.Statements)}
		env := append(def.Environment(d.Region),
			"AWS_ACCESS_KEY_ID="+creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+creds.SecretAccessKey, "AWS_SESSION_TOKEN="+creds.SessionToken,
			// The developer's ~/.aws must not reach the functions.
			"AWS_CONFIG_FILE="+os.DevNull, "AWS_SHARED_CREDENTIALS_FILE="+os.DevNull,
			"AWS_ENDPOINT_URL_DYNAMODB="+proxyURL, "AWS_ENDPOINT_URL_DYNAMODB_STREAMS="+proxyURL,
			"AWS_ENDPOINT_URL_EVENTBRIDGE="+proxyURL, "AWS_ENDPOINT_URL_SQS="+proxyURL, "AWS_ENDPOINT_URL_SECRETS_MANAGER="+proxyURL,
			"AWS_ENDPOINT_URL_SSM="+proxyURL)
		if f.Tracing {
			x, err := startXRayDaemon()
			if err != nil {
				return nil, err
			}
			d.stop = append(d.stop, x.close)
			d.xray[name] = x
			env = append(env, "AWS_XRAY_DAEMON_ADDRESS="+x.addr())
		}
		fn, err := lambdaruntime.StartConfig("", lambdaruntime.Config{Name: def.Name, ARN: names.Attrs[f.LogicalID]["Arn"],
			MemoryMB: f.MemoryMB, Timeout: time.Duration(f.Timeout) * time.Second, Grace: emulationGrace(argv), Argv: argv, Dir: dir}, env...)
		if err != nil {
			return nil, err
		}
		d.fns[name] = fn
	}
	for _, name := range fnames {
		// Lambda gives an init 10 s, and the next invocation after a failed
		// init tries again: three tries here, as qemu-user and the
		// authorizing proxy on a busy machine make an init slower than the
		// code makes it. A function that cannot start fails all three.
		var err error
		for try := 0; try < 3; try++ {
			if try > 0 {
				if err = d.fns[name].Reinit(); err != nil {
					break
				}
			}
			rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			_, err = d.fns[name].Ready(rctx)
			cancel()
			if err == nil {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("function %s (%s) did not start: %w", name, d.Stack.Functions[name].LogicalID, err)
		}
	}

	// The HTTP API.
	mux := gateway.New()
	for _, rt := range d.Stack.Routes {
		if rt.PayloadFormatVersion != "2.0" {
			return nil, fmt.Errorf("route %s (%s): payload format version %q; the functions read 2.0 events", rt.LogicalID, rt.RouteKey, rt.PayloadFormatVersion)
		}
		mux.Route(rt.RouteKey, d.routeHandler(rt, o.Callers))
	}
	var bgctx context.Context
	bgctx, d.cancel = context.WithCancel(context.Background())
	apiURL, stopAPI, err := serve(mux)
	if err != nil {
		return nil, err
	}
	d.URL = apiURL
	d.stop = append(d.stop, stopAPI)

	// Event source mappings.
	for _, m := range d.Stack.Mappings {
		if err := d.startMapping(bgctx, m, proxyURL); err != nil {
			return nil, err
		}
	}
	// Rules on the buses.
	if err := d.startRules(bgctx); err != nil {
		return nil, err
	}
	return d, nil
}

// Close stops everything.
func (d *Deployment) Close() {
	if d.cancel != nil {
		d.cancel()
	}
	d.bg.Wait()
	for _, f := range d.fns {
		f.Close()
	}
	for i := len(d.stop) - 1; i >= 0; i-- {
		d.stop[i]()
	}
}

// Output is what a function printed so far.
func (d *Deployment) Output(name string) string {
	if f := d.fns[name]; f != nil {
		return f.Output()
	}
	return ""
}

// TraceSegments counts the X-Ray segment documents a traced function sent
// (-1: the function is not traced).
func (d *Deployment) TraceSegments(name string) int {
	x := d.xray[name]
	if x == nil {
		return -1
	}
	return int(x.segments.Load())
}

// Invoke runs a function on an event, as `aws lambda invoke` would.
func (d *Deployment) Invoke(ctx context.Context, name string, event []byte) ([]byte, error) {
	f := d.fns[name]
	if f == nil {
		return nil, fmt.Errorf("the template has no function %s", name)
	}
	trace := ""
	if d.xray[name] != nil {
		trace = traceHeader()
	}
	res, err := f.Invoke(ctx, event, trace)
	if err != nil {
		return nil, err
	}
	if res.Error {
		return res.Body, fmt.Errorf("function %s failed: %s", name, res.Body)
	}
	return res.Body, nil
}

// RunSchedule invokes the targets of a schedule rule once, as EventBridge
// does: with the target's Input when it has one, else the scheduled event.
func (d *Deployment) RunSchedule(ctx context.Context, rule template.Rule) error {
	ev, _ := json.Marshal(map[string]any{"version": "0", "id": randomText(16), "detail-type": "Scheduled Event", "source": "aws.events",
		"account": template.Account, "time": time.Now().UTC().Format(time.RFC3339), "region": d.Region,
		"resources": []string{d.Names.Attrs[rule.LogicalID]["Arn"]}, "detail": map[string]any{}})
	for _, t := range rule.Targets {
		in := ev
		if s, ok := rule.Inputs[t]; ok {
			in = []byte(s)
		}
		if _, err := d.Invoke(ctx, t, in); err != nil {
			return err
		}
	}
	return nil
}

// ExpireByTTL deletes an item as DynamoDB's TTL does: the delete, and a
// stream record whose userIdentity is the DynamoDB service (Type Service,
// PrincipalId dynamodb.amazonaws.com), which is how a TTL deletion differs
// from anyone's DeleteItem. A table without TTL has none.
func (d *Deployment) ExpireByTTL(ctx context.Context, table, key string) error {
	if d.TableTTL(table) == "" {
		return fmt.Errorf("table %s has no TTL (%s): DynamoDB deletes nothing by TTL there", table, d.TableOrigin(table))
	}
	d.ttl.Store(key, true)
	_, err := d.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table),
		Key: map[string]ddbtypes.AttributeValue{"actionId": &ddbtypes.AttributeValueMemberS{Value: key}}})
	return err
}

// TableTTL is the attribute DynamoDB's TTL deletes a table's items by (""
// without TTL, or for a table the stack does not have).
func (d *Deployment) TableTTL(table string) string {
	return d.tables[table].TTLAttribute()
}

// TableOrigin says which resource defines a table: the template's, or the
// replica another stack's global table has in this Region.
func (d *Deployment) TableOrigin(table string) string {
	t, ok := d.tables[table]
	switch {
	case !ok:
		return "not a table of the stack"
	case strings.Contains(t.LogicalID, "/"):
		return "the replica in " + d.Region + " of the global table " + t.LogicalID
	}
	return "resource " + t.LogicalID + " of the template"
}

// AgeRecords moves the mappings' clock ahead by by (0: back to now), so
// records in flight pass MaximumRecordAgeInSeconds without waiting hours.
func (d *Deployment) AgeRecords(by time.Duration) { d.clockAhead.Store(int64(by)) }

// RouteHits counts the requests each route key received.
func (d *Deployment) RouteHits() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for k, v := range d.routeHits {
		out[k] = v
	}
	return out
}

// Deliveries are the events rules delivered so far.
func (d *Deployment) Deliveries() []Delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Delivery(nil), d.deliveries...)
}

// Failures are what the stack's own machinery saw go wrong (a mapping that
// could not read, a target that could not be invoked).
func (d *Deployment) Failures() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.failures...)
}

func (d *Deployment) fail(format string, a ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failures = append(d.failures, fmt.Sprintf(format, a...))
}

// awsConfig is an SDK configuration with a function's role credentials,
// through the authorizing proxy (the mapping reads and sets aside as its
// function's role, as Lambda does).
func (d *Deployment) awsConfig(function, proxyURL string) aws.Config {
	cfg := awsconfig.Local(proxyURL)
	cfg.Region = d.Region
	c := d.creds[function]
	cfg.Credentials = credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)
	return cfg
}

func (d *Deployment) startMapping(ctx context.Context, m template.Mapping, proxyURL string) error {
	var filter *quamina.Quamina
	if len(m.Filters) > 0 {
		q, err := quamina.New()
		if err != nil {
			return err
		}
		for i, p := range m.Filters {
			if err := q.AddPattern(i, p); err != nil {
				return fmt.Errorf("mapping %s: filter %s: %w", m.LogicalID, p, err)
			}
		}
		filter = q
	}
	cfg := d.awsConfig(m.Function, proxyURL)
	fn := m.Function
	handle := func(ctx context.Context, ev lambdaevents.DynamoDBEvent) (lambdaevents.DynamoDBEventResponse, error) {
		var keep lambdaevents.DynamoDBEvent
		for _, rec := range ev.Records {
			if rec.EventName == "REMOVE" {
				for _, k := range rec.Change.Keys {
					if _, ok := d.ttl.Load(k.String()); ok {
						rec.UserIdentity = &lambdaevents.DynamoDBUserIdentity{Type: "Service", PrincipalID: "dynamodb.amazonaws.com"}
					}
				}
			}
			if filter == nil {
				keep.Records = append(keep.Records, rec)
				continue
			}
			b, err := json.Marshal(rec)
			if err != nil {
				return lambdaevents.DynamoDBEventResponse{}, err
			}
			if ms, err := filter.MatchesForEvent(b); err == nil && len(ms) > 0 {
				keep.Records = append(keep.Records, rec)
			}
		}
		if len(keep.Records) == 0 { // filtered out: Lambda drops them
			return lambdaevents.DynamoDBEventResponse{}, nil
		}
		body, err := json.Marshal(keep)
		if err != nil {
			return lambdaevents.DynamoDBEventResponse{}, err
		}
		out, err := d.Invoke(ctx, fn, body)
		if err != nil {
			return lambdaevents.DynamoDBEventResponse{}, err
		}
		var resp lambdaevents.DynamoDBEventResponse
		if m.ReportBatchItemFailures {
			_ = json.Unmarshal(out, &resp)
		}
		return resp, nil
	}
	r := &streams.Reader{Streams: dynamodbstreams.NewFromConfig(cfg), StreamArn: m.EventSourceArn, Handle: handle, Log: d.log,
		Batch: int32(m.BatchSize), Poll: 50 * time.Millisecond, Backoff: 100 * time.Millisecond, MaxBackoff: time.Second,
		RetryAttempts: m.MaximumRetryAttempts}
	switch {
	case m.MaximumRetryAttempts == 0:
		return fmt.Errorf("mapping %s: MaximumRetryAttempts 0 (no retries) is not modelled by the local reader", m.LogicalID)
	case m.BisectBatchOnFunctionError, m.ParallelizationFactor != 1, m.TumblingWindowInSeconds != 0:
		return fmt.Errorf("mapping %s: BisectBatchOnFunctionError, ParallelizationFactor and TumblingWindowInSeconds are not modelled by the local reader", m.LogicalID)
	case m.StartingPosition != "TRIM_HORIZON":
		return fmt.Errorf("mapping %s: StartingPosition %q; the local reader reads from TRIM_HORIZON", m.LogicalID, m.StartingPosition)
	}
	if m.MaximumRecordAgeSeconds > 0 {
		r.MaxRecordAge = time.Duration(m.MaximumRecordAgeSeconds) * time.Second
	}
	r.Now = func() time.Time { return time.Now().Add(time.Duration(d.clockAhead.Load())) }
	q := sqs.NewFromConfig(cfg)
	dest := m.OnFailure
	r.SetAside = func(ctx context.Context, f streams.OnFailure) {
		if dest == "" {
			d.fail("mapping %s set aside %d records (%s) and has no on-failure destination: they are lost", m.LogicalID, f.BatchInfo.BatchSize, f.Condition)
			return
		}
		var url string
		for _, qu := range d.Stack.Queues {
			if qu.Arn == dest {
				url = qu.URL
			}
		}
		if url == "" {
			d.fail("mapping %s: on-failure destination %s is not a queue of the template", m.LogicalID, dest)
			return
		}
		body, _ := json.Marshal(map[string]any{"requestContext": map[string]any{"condition": f.Condition, "approximateInvokeCount": f.ApproximateInvokeCount,
			"functionArn": d.Names.Attrs[d.Stack.Functions[fn].LogicalID]["Arn"]}, "DDBStreamBatchInfo": f.BatchInfo, "timestamp": f.Timestamp})
		if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(string(body))}); err != nil {
			d.fail("mapping %s: sending to its on-failure destination failed: %v", m.LogicalID, err)
		}
	}
	d.bg.Go(func() {
		if err := r.Run(ctx); err != nil && ctx.Err() == nil {
			d.fail("mapping %s stopped: %v", m.LogicalID, err)
		}
	})
	return nil
}

func (d *Deployment) startRules(ctx context.Context) error {
	type rule struct {
		template.Rule
		q *quamina.Quamina
	}
	var rules []rule
	for _, rl := range d.Stack.Rules {
		if rl.Pattern == "" {
			continue
		}
		q, err := quamina.New()
		if err != nil {
			return err
		}
		if err := q.AddPattern(rl.LogicalID, rl.Pattern); err != nil {
			return fmt.Errorf("rule %s: pattern %s: %w", rl.LogicalID, rl.Pattern, err)
		}
		rules = append(rules, rule{rl, q})
		for _, t := range rl.Targets {
			if d.ruleQ[t] == nil {
				ch := make(chan []byte, 10000)
				d.ruleQ[t] = ch
				target, ruleID := t, rl.LogicalID
				d.bg.Go(func() {
					for {
						select {
						case <-ctx.Done():
							return
						case ev := <-ch:
							_, err := d.Invoke(ctx, target, ev)
							d.mu.Lock()
							d.deliveries = append(d.deliveries, Delivery{Rule: ruleID, Target: target, Event: ev, Err: err})
							d.mu.Unlock()
						}
					}
				})
			}
		}
	}
	d.Bus.Subscribe(func(ev eventbus.Event) {
		busArn := ev.Bus
		if !strings.HasPrefix(busArn, "arn:") {
			busArn = template.ARN("events", d.Region, "event-bus/"+ev.Bus)
		}
		env, _ := json.Marshal(map[string]any{"version": "0", "id": ev.ID, "detail-type": ev.DetailType, "source": ev.Source,
			"account": template.Account, "time": ev.Time, "region": d.Region, "resources": []string{}, "detail": ev.Detail})
		for _, rl := range rules {
			if rl.BusArn != busArn {
				continue
			}
			if ms, err := rl.q.MatchesForEvent(env); err != nil || len(ms) == 0 {
				continue
			}
			for _, t := range rl.Targets {
				select {
				case d.ruleQ[t] <- env:
				default:
					d.fail("rule %s: target %s queue full", rl.LogicalID, t)
				}
			}
		}
	})
	return nil
}

// routeHandler invokes a route's function as API Gateway does, after its
// authorization: AWS_IAM (a SigV4 signature by a known caller), JWT (a
// bearer token with one of the route's scopes) or NONE.
func (d *Deployment) routeHandler(rt template.Route, callers map[string]string) gateway.Handler {
	return func(ctx context.Context, ev lambdaevents.APIGatewayV2HTTPRequest) (lambdaevents.APIGatewayV2HTTPResponse, error) {
		d.mu.Lock()
		if d.routeHits == nil {
			d.routeHits = map[string]int{}
		}
		d.routeHits[rt.RouteKey]++
		d.mu.Unlock()
		forbidden := func(status int, msg string) (lambdaevents.APIGatewayV2HTTPResponse, error) {
			return lambdaevents.APIGatewayV2HTTPResponse{StatusCode: status, Headers: map[string]string{"content-type": "application/json"},
				Body: `{"message":"` + msg + `"}`}, nil
		}
		auth := ev.Headers["authorization"]
		switch rt.AuthorizationType {
		case "AWS_IAM":
			m := sigKey(auth)
			arn, ok := callers[m]
			if !ok {
				return forbidden(http.StatusForbidden, "Forbidden")
			}
			ev.RequestContext.Authorizer = &lambdaevents.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: gateway.IAMCaller(arn, m)}
		case "JWT":
			claims, ok := bearerClaims(auth)
			if !ok || gateway.CheckJWT(claims, rt.Issuer, rt.Audience, time.Now()) != nil {
				return forbidden(http.StatusUnauthorized, "Unauthorized")
			}
			scopes := strings.Fields(fmt.Sprint(claims["scope"]))
			if len(rt.Scopes) > 0 && !anyIn(scopes, rt.Scopes) {
				return forbidden(http.StatusForbidden, "Forbidden")
			}
			cl := gateway.JWTClaims(claims)
			ev.RequestContext.Authorizer = &lambdaevents.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &lambdaevents.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: cl, Scopes: scopes}}
		default:
			ev.RequestContext.Authorizer = nil
		}
		body, err := json.Marshal(ev)
		if err != nil {
			return lambdaevents.APIGatewayV2HTTPResponse{}, err
		}
		out, err := d.Invoke(ctx, rt.Function, body)
		if err != nil {
			return lambdaevents.APIGatewayV2HTTPResponse{}, err
		}
		var resp lambdaevents.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			return resp, fmt.Errorf("route %s: the function's answer is not a 2.0 response: %w", rt.RouteKey, err)
		}
		return resp, nil
	}
}

func anyIn(have, want []string) bool {
	for _, h := range have {
		for _, w := range want {
			if h == w {
				return true
			}
		}
	}
	return false
}

// sigKey is the access key id of a SigV4 Authorization header.
func sigKey(auth string) string {
	_, rest, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return ""
	}
	key, _, _ := strings.Cut(rest, "/")
	return key
}

// bearerClaims reads the claims of a bearer JWT. The local authorizer does
// not verify signatures (the issuer's keys are not here); it checks the
// route's scopes as API Gateway does.
func bearerClaims(auth string) (map[string]any, bool) {
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		return nil, false
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, false
	}
	b, err := base64URL(parts[1])
	if err != nil {
		return nil, false
	}
	var claims map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // numbers as the token writes them
	if dec.Decode(&claims) != nil {
		return nil, false
	}
	return claims, true
}

// allows reports whether a statement allows action (by name or a wildcard).
func allows(stmts []template.Statement, action string) bool {
	for _, st := range stmts {
		if st.Doc["Effect"] != "Allow" {
			continue
		}
		var acts []any
		switch a := st.Doc["Action"].(type) {
		case string:
			acts = []any{a}
		case []any:
			acts = a
		}
		for _, a := range acts {
			if s, _ := a.(string); s == action || s == "*" || s == strings.SplitN(action, ":", 2)[0]+":*" {
				return true
			}
		}
	}
	return false
}

func statements(in []template.Statement) []iam.Statement {
	out := make([]iam.Statement, len(in))
	for i, s := range in {
		out[i] = iam.Statement{ID: s.ID, Doc: s.Doc}
	}
	return out
}

// createTable creates a template's table in DynamoDB Local and returns its
// stream ARN ("" without a stream).
func createTable(ctx context.Context, db *dynamodb.Client, name string, props map[string]any, partitionKeys map[string]string) (string, error) {
	sub := map[string]any{"TableName": name, "BillingMode": "PAY_PER_REQUEST"}
	for _, k := range []string{"AttributeDefinitions", "KeySchema", "GlobalSecondaryIndexes", "LocalSecondaryIndexes"} {
		if v, ok := props[k]; ok {
			sub[k] = v
		}
	}
	if ss, ok := props["StreamSpecification"].(map[string]any); ok {
		sub["StreamSpecification"] = map[string]any{"StreamEnabled": true, "StreamViewType": ss["StreamViewType"]}
	}
	b, err := json.Marshal(sub)
	if err != nil {
		return "", err
	}
	var in dynamodb.CreateTableInput
	if err := json.Unmarshal(b, &in); err != nil {
		return "", fmt.Errorf("its properties do not make a CreateTable request: %w", err)
	}
	hash := func(ks any) string {
		for _, k := range asList(ks) {
			km, _ := k.(map[string]any)
			if km["KeyType"] == "HASH" {
				s, _ := km["AttributeName"].(string)
				return s
			}
		}
		return ""
	}
	partitionKeys[name] = hash(props["KeySchema"])
	for _, g := range append(asList(props["GlobalSecondaryIndexes"]), asList(props["LocalSecondaryIndexes"])...) {
		gm, _ := g.(map[string]any)
		partitionKeys[name+"/"+fmt.Sprint(gm["IndexName"])] = hash(gm["KeySchema"])
	}
	out, err := db.CreateTable(ctx, &in)
	if err != nil {
		return "", err
	}
	return aws.ToString(out.TableDescription.LatestStreamArn), nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
