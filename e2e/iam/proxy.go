package iam

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/exactonce/exactonce/local/awsfake"
)

// Statement is one statement of a role's policies, named by its policy's
// logical id and its index ("CreateRoleDefaultPolicy89D12317[1]").
type Statement struct {
	ID  string
	Doc map[string]any
}

// Principal is a caller the proxy knows: a function's role.
type Principal struct {
	Function   string // the function's name (create, publisher, …)
	RoleArn    string
	Statements []Statement
}

// Service names the proxy forwards to.
const (
	DynamoDB       = "dynamodb"
	Streams        = "streams"
	Events         = "events"
	SQS            = "sqs"
	SecretsManager = "secretsmanager"
	SSM            = "ssm"
)

// Proxy is the authorizing proxy. Set its fields, then serve it.
type Proxy struct {
	Eval *Evaluator
	// Keys maps an access key id to its principal.
	Keys map[string]*Principal
	// Backends maps a service (DynamoDB, Streams, …) to its local URL.
	Backends map[string]string
	// PartitionKeys maps a table name, and "table/index" for each index, to
	// its partition key attribute (for dynamodb:LeadingKeys).
	PartitionKeys map[string]string
	// ResourcePolicies maps a resource ARN to its resource policy (the bus).
	ResourcePolicies map[string]any
	// Region and Account build the ARNs of the calls.
	Region, Account string
	// Secrets are the ARNs of the secrets, for calls that name a secret
	// rather than give its ARN.
	Secrets []string

	Client *http.Client
	// Slow, when set, hears of calls the local service took over 2 s to answer.
	Slow func(call string, took time.Duration)

	mu        sync.Mutex
	calls     int
	denied    []string
	used      map[string]int
	actions   map[string]int // "function action" → calls allowed
	unmodeled []string
	iterators map[string]string // shard iterator → stream ARN
}

// Stats are the proxy's counts.
type Stats struct {
	Calls     int            // calls authorized and forwarded
	Denied    []string       // one line per denied call
	Used      map[string]int // statement id → calls it allowed
	Actions   map[string]int // "function action" → calls allowed
	Unmodeled []string       // calls the proxy could not map (refused)
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Calls: p.calls, Denied: append([]string(nil), p.denied...), Used: maps.Clone(p.used), Actions: maps.Clone(p.actions),
		Unmodeled: append([]string(nil), p.unmodeled...)}
}

// check is one authorization a call needs.
type check struct {
	action, resource string
	context          map[string]any
	resourcePolicy   any
}

var credential = regexp.MustCompile(`Credential=([^/,\s]+)/`)

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	target := r.Header.Get("X-Amz-Target")
	service, op := serviceOf(target)
	m := credential.FindStringSubmatch(r.Header.Get("Authorization"))
	var who *Principal
	if m != nil {
		who = p.Keys[m[1]]
	}
	if who == nil {
		p.fail(w, service, http.StatusForbidden, "UnrecognizedClientException", "The security token included in the request is invalid.")
		p.note(&p.denied, fmt.Sprintf("unknown caller (access key %q) called %s", first(m), target))
		return
	}
	checks, err := p.checks(service, op, body)
	if err != nil {
		p.note(&p.unmodeled, fmt.Sprintf("%s: %s: %v", who.Function, target, err))
		p.fail(w, service, http.StatusBadRequest, "UnknownOperationException", "the e2e proxy cannot authorize "+target+": "+err.Error())
		return
	}
	var usedBy, actions []string
	for _, c := range checks {
		d, err := p.decide(who, c)
		if err != nil {
			p.note(&p.unmodeled, fmt.Sprintf("%s: %s: %v", who.Function, target, err))
			p.fail(w, service, http.StatusBadRequest, "ValidationException", err.Error())
			return
		}
		if d.Result != "Allowed" {
			why := "because no identity-based policy allows the " + c.action + " action"
			if d.Result == "ExplicitlyDenied" {
				why = "with an explicit deny in a resource-based policy"
			}
			msg := fmt.Sprintf("User: arn:aws:sts::%s:assumed-role/%s/%s is not authorized to perform: %s on resource: %s %s",
				p.Account, roleName(who.RoleArn), who.Function, c.action, c.resource, why)
			p.note(&p.denied, fmt.Sprintf("%s: %s on %s %s (context %s)", who.Function, c.action, c.resource, d.Result, compact(c.context)))
			p.fail(w, service, http.StatusBadRequest, "AccessDeniedException", msg)
			return
		}
		usedBy = append(usedBy, d.Allow...)
		actions = append(actions, who.Function+" "+c.action)
	}
	p.mu.Lock()
	p.calls++
	if p.used == nil {
		p.used = map[string]int{}
	}
	for _, s := range usedBy {
		p.used[s]++
	}
	if p.actions == nil {
		p.actions = map[string]int{}
	}
	for _, a := range actions {
		p.actions[a]++
	}
	p.mu.Unlock()
	p.forward(w, r, service, op, body)
}

func first(m []string) string {
	if len(m) > 1 {
		return m[1]
	}
	return ""
}

func (p *Proxy) note(list *[]string, s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	*list = append(*list, s)
}

func compact(m map[string]any) string {
	b, _ := json.Marshal(m)
	return string(b)
}

func roleName(arn string) string {
	return arn[strings.LastIndex(arn, "/")+1:]
}

func (p *Proxy) decide(who *Principal, c check) (Decision, error) {
	pols := make([]Policy, len(who.Statements))
	for i, s := range who.Statements {
		pols[i] = Policy{Name: s.ID, Policy: map[string]any{"Version": "2012-10-17", "Statement": []any{s.Doc}}}
	}
	ctx := map[string]any{"aws:PrincipalArn": who.RoleArn, "aws:PrincipalAccount": p.Account}
	for k, v := range c.context {
		ctx[k] = v
	}
	return p.Eval.Evaluate(Request{IdentityPolicies: pols, ResourcePolicy: c.resourcePolicy, Action: c.action,
		Principal: who.RoleArn, Account: p.Account, Resource: c.resource, Context: ctx})
}

// serviceOf maps an X-Amz-Target to the service and operation.
func serviceOf(target string) (string, string) {
	prefix, op, _ := strings.Cut(target, ".")
	switch prefix {
	case "DynamoDB_20120810":
		return DynamoDB, op
	case "DynamoDBStreams_20120810":
		return Streams, op
	case "AWSEvents":
		return Events, op
	case "AmazonSQS":
		return SQS, op
	case "secretsmanager":
		return SecretsManager, op
	case "AmazonSSM":
		return SSM, op
	}
	return "", target
}

func (p *Proxy) arn(service, resource string) string {
	return "arn:aws:" + service + ":" + p.Region + ":" + p.Account + ":" + resource
}

// checks maps one call to the authorizations it needs.
func (p *Proxy) checks(service, op string, body []byte) ([]check, error) {
	var in map[string]any
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("body is not JSON")
	}
	str := func(k string) string { s, _ := in[k].(string); return s }
	switch service {
	case DynamoDB:
		return p.dynamoChecks(op, in)
	case Streams:
		action := "dynamodb:" + op
		switch op {
		case "ListStreams":
			return []check{{action: action, resource: "*"}}, nil
		case "GetRecords":
			p.mu.Lock()
			arn := p.iterators[str("ShardIterator")]
			p.mu.Unlock()
			if arn == "" {
				return nil, fmt.Errorf("GetRecords with a shard iterator the proxy never handed out")
			}
			return []check{{action: action, resource: arn}}, nil
		default:
			if str("StreamArn") == "" {
				return nil, fmt.Errorf("%s without StreamArn", op)
			}
			return []check{{action: action, resource: str("StreamArn")}}, nil
		}
	case Events:
		if op != "PutEvents" {
			return nil, fmt.Errorf("the local bus serves PutEvents only")
		}
		entries, _ := in["Entries"].([]any)
		var out []check
		for _, e := range entries {
			e, _ := e.(map[string]any)
			bus, _ := e["EventBusName"].(string)
			if bus == "" {
				bus = "default"
			}
			arn := bus
			if !strings.HasPrefix(bus, "arn:") {
				arn = p.arn("events", "event-bus/"+bus)
			}
			src, _ := e["Source"].(string)
			dt, _ := e["DetailType"].(string)
			out = append(out, check{action: "events:PutEvents", resource: arn, resourcePolicy: p.ResourcePolicies[arn],
				context: map[string]any{"events:source": []string{src}, "events:detail-type": []string{dt}}})
		}
		return out, nil
	case SQS:
		u := str("QueueUrl")
		if u == "" {
			return nil, fmt.Errorf("%s without QueueUrl", op)
		}
		return []check{{action: "sqs:" + op, resource: p.arn("sqs", u[strings.LastIndex(u, "/")+1:])}}, nil
	case SecretsManager:
		id := str("SecretId")
		if id == "" {
			return nil, fmt.Errorf("%s without SecretId", op)
		}
		if !strings.HasPrefix(id, "arn:") { // by name: IAM sees the secret's ARN
			arn := p.arn("secretsmanager", "secret:"+id)
			for _, s := range p.Secrets {
				if awsfake.SecretName(s) == id {
					arn = s
				}
			}
			id = arn
		}
		return []check{{action: "secretsmanager:" + op, resource: id}}, nil
	case SSM:
		name := str("Name")
		if name == "" || strings.HasPrefix(name, "arn:") {
			return nil, fmt.Errorf("%s needs the parameter's name (%q)", op, name)
		}
		return []check{{action: "ssm:" + op, resource: p.arn("ssm", "parameter/"+strings.TrimPrefix(name, "/"))}}, nil
	}
	return nil, fmt.Errorf("no AWS service the local stack serves")
}

func (p *Proxy) dynamoChecks(op string, in map[string]any) ([]check, error) {
	action := "dynamodb:" + op
	table, _ := in["TableName"].(string)
	tableArn := func(t string) string { return p.arn("dynamodb", "table/"+t) }
	leading := func(t string, keys ...any) map[string]any {
		pk := p.PartitionKeys[t]
		var vals []string
		for _, k := range keys {
			km, _ := k.(map[string]any)
			if v, ok := attrString(km[pk]); ok {
				vals = append(vals, v)
			}
		}
		return map[string]any{"dynamodb:LeadingKeys": vals}
	}
	switch op {
	case "GetItem", "UpdateItem", "DeleteItem":
		return []check{{action: action, resource: tableArn(table), context: leading(table, in["Key"])}}, nil
	case "PutItem":
		return []check{{action: action, resource: tableArn(table), context: leading(table, in["Item"])}}, nil
	case "Query", "Scan":
		res, keyOf := tableArn(table), table
		if idx, _ := in["IndexName"].(string); idx != "" {
			res, keyOf = tableArn(table)+"/index/"+idx, table+"/"+idx
		}
		c := check{action: action, resource: res}
		if op == "Query" {
			if v, ok := queryPartition(in, p.PartitionKeys[keyOf]); ok {
				c.context = map[string]any{"dynamodb:LeadingKeys": []string{v}}
			}
		}
		return []check{c}, nil
	case "BatchGetItem", "BatchWriteItem":
		items, _ := in["RequestItems"].(map[string]any)
		names := make([]string, 0, len(items))
		for t := range items {
			names = append(names, t)
		}
		sort.Strings(names)
		var out []check
		for _, t := range names {
			var keys []any
			switch v := items[t].(type) {
			case map[string]any: // BatchGetItem: {Keys: [...]}
				keys, _ = v["Keys"].([]any)
			case []any: // BatchWriteItem: [{PutRequest:{Item}}|{DeleteRequest:{Key}}]
				for _, w := range v {
					wm, _ := w.(map[string]any)
					if put, ok := wm["PutRequest"].(map[string]any); ok {
						keys = append(keys, put["Item"])
					}
					if del, ok := wm["DeleteRequest"].(map[string]any); ok {
						keys = append(keys, del["Key"])
					}
				}
			}
			out = append(out, check{action: action, resource: tableArn(t), context: leading(t, keys...)})
		}
		return out, nil
	case "TransactWriteItems", "TransactGetItems":
		items, _ := in["TransactItems"].([]any)
		var out []check
		for _, it := range items {
			itm, _ := it.(map[string]any)
			for kind, v := range itm {
				vm, _ := v.(map[string]any)
				t, _ := vm["TableName"].(string)
				act := map[string]string{"Update": "UpdateItem", "Put": "PutItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}[kind]
				key := vm["Key"]
				if kind == "Put" {
					key = vm["Item"]
				}
				out = append(out, check{action: "dynamodb:" + act, resource: tableArn(t), context: leading(t, key)})
			}
		}
		return out, nil
	}
	if table == "" {
		return nil, fmt.Errorf("%s without TableName", op)
	}
	return []check{{action: action, resource: tableArn(table)}}, nil
}

// attrString is the value of a string, number or binary key attribute.
func attrString(v any) (string, bool) {
	m, _ := v.(map[string]any)
	for _, t := range []string{"S", "N", "B"} {
		if s, ok := m[t].(string); ok {
			return s, true
		}
	}
	return "", false
}

var keyEq = regexp.MustCompile(`([#A-Za-z0-9_.]+)\s*=\s*(:[A-Za-z0-9_]+)`)

// queryPartition finds the partition key value of a Query's
// KeyConditionExpression ("#u = :u AND …").
func queryPartition(in map[string]any, pk string) (string, bool) {
	expr, _ := in["KeyConditionExpression"].(string)
	names, _ := in["ExpressionAttributeNames"].(map[string]any)
	values, _ := in["ExpressionAttributeValues"].(map[string]any)
	for _, m := range keyEq.FindAllStringSubmatch(expr, -1) {
		name := m[1]
		if n, ok := names[name].(string); ok {
			name = n
		}
		if name == pk {
			return attrString(values[m[2]])
		}
	}
	return "", false
}

// forward sends the call on to its local service and the answer back.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, service, op string, body []byte) {
	base, ok := p.Backends[service]
	if !ok {
		p.fail(w, service, http.StatusBadRequest, "UnknownOperationException", "no local "+service)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		p.fail(w, service, http.StatusInternalServerError, "InternalFailure", err.Error())
		return
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	client := p.Client
	if client == nil {
		client = http.DefaultClient
	}
	began := time.Now()
	resp, err := client.Do(req)
	if took := time.Since(began); took > 2*time.Second && p.Slow != nil {
		p.Slow(service+"."+op, took)
	}
	if err != nil {
		p.fail(w, service, http.StatusServiceUnavailable, "ServiceUnavailable", "local "+service+" unreachable")
		return
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		p.fail(w, service, http.StatusServiceUnavailable, "ServiceUnavailable", "local "+service+" answer cut")
		return
	}
	if service == Streams && resp.StatusCode == http.StatusOK {
		p.learnIterators(op, body, out)
	}
	for k, v := range resp.Header {
		if !strings.EqualFold(k, "Content-Length") {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}

// learnIterators remembers which stream each shard iterator reads, so a
// GetRecords (which names only its iterator) is authorized on its stream.
func (p *Proxy) learnIterators(op string, req, resp []byte) {
	var in struct{ StreamArn, ShardIterator string }
	var out struct{ ShardIterator, NextShardIterator string }
	if json.Unmarshal(req, &in) != nil || json.Unmarshal(resp, &out) != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.iterators == nil {
		p.iterators = map[string]string{}
	}
	switch op {
	case "GetShardIterator":
		if out.ShardIterator != "" {
			p.iterators[out.ShardIterator] = in.StreamArn
		}
	case "GetRecords":
		if arn := p.iterators[in.ShardIterator]; arn != "" && out.NextShardIterator != "" {
			p.iterators[out.NextShardIterator] = arn
		}
		delete(p.iterators, in.ShardIterator)
	}
}

// fail answers an error the way the service's protocol does.
func (p *Proxy) fail(w http.ResponseWriter, service string, status int, code, msg string) {
	typ := code
	switch service {
	case DynamoDB, Streams:
		typ = "com.amazonaws.dynamodb.v20120810#" + code
	case SQS:
		typ = "com.amazon.coral.service#" + code
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg, "Message": msg})
}
