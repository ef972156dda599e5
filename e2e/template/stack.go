package template

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Stack is what the suite runs, read from a template: every part resolved
// to local names.
type Stack struct {
	Region    string               // the Region it runs in (Names.Region)
	Functions map[string]*Function // by code name (create, publisher, …)
	// Providers are the functions of custom resources (their
	// ServiceToken), by logical id: CloudFormation invokes them at deploy
	// time, nothing does after, and the local stack makes their calls
	// itself (see CustomResources); Name is the logical id.
	Providers       map[string]*Function
	CustomResources []CustomResource
	Routes          []Route
	Mappings        []Mapping
	Rules           []Rule
	Tables          map[string]Table // by logical id
	Queues          map[string]Queue // by logical id
	Secrets         map[string]string
	// Parameters are the SSM parameters' values by name.
	Parameters map[string]string
	Buses      map[string]Bus // by ARN
}

// Function is one AWS::Lambda::Function.
type Function struct {
	LogicalID string
	Name      string            // its code: the folder under functions/
	Env       map[string]string // exactly the template's variables
	RoleArn   string
	Timeout   int // seconds (default 3, as Lambda)
	MemoryMB  int // default 128
	// How Lambda runs it: Runtime, Handler, Architectures (empty: x86_64),
	// Tracing (TracingConfig Active), LogFormat (LoggingConfig).
	Runtime, Handler string
	Architectures    []string
	Tracing          bool
	LogFormat        string
	// Code is its code: the S3 object key of a zip asset of the cloud
	// assembly ("" when the code is not an S3 object: ZipFile, ImageUri).
	Code string
	// Statements of every policy attached to its role, in template order.
	Statements []Statement
}

// Statement is one policy statement, named Policy[index].
type Statement struct {
	ID  string
	Doc map[string]any
}

// Route is one AWS::ApiGatewayV2::Route and its integration.
type Route struct {
	LogicalID         string
	RouteKey          string
	AuthorizationType string
	Scopes            []string
	// JWT authorizer settings (AuthorizationType JWT).
	Issuer               string
	Audience             []string
	Function             string // code name of the integration's function
	PayloadFormatVersion string
}

// Mapping is one AWS::Lambda::EventSourceMapping.
type Mapping struct {
	LogicalID               string
	Function                string
	EventSourceArn          string
	BatchSize               int
	Filters                 []string
	ReportBatchItemFailures bool
	MaximumRetryAttempts    int // -1: until the record age limit
	MaximumRecordAgeSeconds int
	OnFailure               string // destination ARN ("" when none)
	StartingPosition        string
	// Settings the local mapping does not model (the suite refuses them).
	BisectBatchOnFunctionError bool
	ParallelizationFactor      int
	TumblingWindowInSeconds    int
}

// Rule is one AWS::Events::Rule.
type Rule struct {
	LogicalID string
	BusArn    string // "" for a schedule
	Pattern   string // EventPattern as JSON
	Schedule  string
	Targets   []string // code names of target functions
	// Inputs are the targets' constant Input by code name (a target
	// without one gets the event).
	Inputs map[string]string
}

// Table is one table's properties (resolved).
type Table struct {
	LogicalID, Name string
	Properties      map[string]any
}

// TTLAttribute is the attribute DynamoDB's TTL deletes items by ("" when
// the table has no TTL: an MRSC global table cannot).
func (t Table) TTLAttribute() string {
	ts, _ := t.Properties["TimeToLiveSpecification"].(map[string]any)
	if ts["Enabled"] != true {
		return ""
	}
	return str(ts["AttributeName"])
}

// Queue is one AWS::SQS::Queue.
type Queue struct{ LogicalID, Name, URL, Arn string }

// Bus is one AWS::Events::EventBus and its resource policy.
type Bus struct {
	LogicalID, Name, Arn string
	Policy               map[string]any // nil without one
}

// Model reads the stack from t with names n (StreamArn attributes set).
func Model(t *Template, n *Names) (*Stack, error) {
	s := &Stack{Region: n.Region(), Functions: map[string]*Function{}, Providers: map[string]*Function{}, Tables: map[string]Table{}, Queues: map[string]Queue{},
		Secrets: map[string]string{}, Buses: map[string]Bus{}, Parameters: map[string]string{}}
	var err error
	if s.CustomResources, err = CustomResources(t, n); err != nil {
		return nil, err
	}
	providerRoles := map[string]bool{}
	for _, c := range s.CustomResources {
		providerRoles[refID(t.Resources[c.Provider].Properties["Role"])] = true
	}
	byLogical := map[string]*Function{}
	roleStatements := map[string][]Statement{}
	for _, id := range t.OfType("AWS::IAM::Policy") {
		props, err := resolved(n, t.Resources[id])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		doc, _ := props["PolicyDocument"].(map[string]any)
		stmts := asList(doc["Statement"])
		for _, role := range asList(props["Roles"]) {
			for i, st := range stmts {
				m, _ := st.(map[string]any)
				roleStatements[fmt.Sprint(role)] = append(roleStatements[fmt.Sprint(role)], Statement{ID: fmt.Sprintf("%s[%d]", id, i), Doc: m})
			}
		}
	}
	for _, id := range t.OfType("AWS::IAM::Role") {
		props, err := resolved(n, t.Resources[id])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		if m := asList(props["ManagedPolicyArns"]); len(m) > 0 && !(providerRoles[id] && len(m) == 1 && m[0] == basicExecution) {
			return nil, fmt.Errorf("role %s has managed policies %v: the suite evaluates only the template's own statements", id, m)
		}
		for _, p := range asList(props["Policies"]) {
			pm, _ := p.(map[string]any)
			doc, _ := pm["PolicyDocument"].(map[string]any)
			for i, st := range asList(doc["Statement"]) {
				m, _ := st.(map[string]any)
				roleStatements[n.Refs[id]] = append(roleStatements[n.Refs[id]], Statement{ID: fmt.Sprintf("%s.%v[%d]", id, pm["PolicyName"], i), Doc: m})
			}
		}
	}
	for _, id := range t.OfType("AWS::Lambda::Function") {
		r := t.Resources[id]
		props, err := resolved(n, r)
		if err != nil {
			return nil, fmt.Errorf("function %s: %w", id, err)
		}
		name := codeName(r)
		if isProvider(s.CustomResources, id) {
			name = id
		} else if name == "" {
			return nil, fmt.Errorf("function %s: cannot tell which functions/ folder it runs (no aws:cdk:path metadata ending in <Name>/Function/Resource)", id)
		}
		f := &Function{LogicalID: id, Name: name, Env: map[string]string{}}
		if env, ok := props["Environment"].(map[string]any); ok {
			vars, _ := env["Variables"].(map[string]any)
			for k, v := range vars {
				f.Env[k] = fmt.Sprint(v)
			}
		}
		f.RoleArn, _ = props["Role"].(string)
		f.Timeout, f.MemoryMB = num(props["Timeout"], 3), num(props["MemorySize"], 128)
		f.Runtime, f.Handler = str(props["Runtime"]), str(props["Handler"])
		for _, a := range asList(props["Architectures"]) {
			f.Architectures = append(f.Architectures, fmt.Sprint(a))
		}
		if tc, ok := props["TracingConfig"].(map[string]any); ok {
			f.Tracing = tc["Mode"] == "Active"
		}
		if lc, ok := props["LoggingConfig"].(map[string]any); ok {
			f.LogFormat = str(lc["LogFormat"])
		}
		if code, ok := props["Code"].(map[string]any); ok {
			f.Code = str(code["S3Key"])
		}
		roleName := f.RoleArn[strings.LastIndex(f.RoleArn, "/")+1:]
		f.Statements = roleStatements[roleName]
		if name == id {
			s.Providers[id] = f
			continue
		}
		if _, dup := s.Functions[name]; dup {
			return nil, fmt.Errorf("two functions run functions/%s", name)
		}
		s.Functions[name] = f
		byLogical[id] = f
	}
	arnToFunction := func(arn string) *Function {
		for _, f := range s.Functions {
			if n.Attrs[f.LogicalID]["Arn"] == arn || n.Refs[f.LogicalID] == arn {
				return f
			}
		}
		return nil
	}
	integrations := map[string]map[string]any{}
	for _, id := range t.OfType("AWS::ApiGatewayV2::Integration") {
		props, err := resolved(n, t.Resources[id])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		integrations[n.Refs[id]] = props
	}
	for _, id := range t.OfType("AWS::ApiGatewayV2::Route") {
		props, err := resolved(n, t.Resources[id])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		rt := Route{LogicalID: id, RouteKey: str(props["RouteKey"]), AuthorizationType: str(props["AuthorizationType"])}
		for _, sc := range asList(props["AuthorizationScopes"]) {
			rt.Scopes = append(rt.Scopes, fmt.Sprint(sc))
		}
		if rt.AuthorizationType == "JWT" {
			az, ok := t.Resources[str(props["AuthorizerId"])]
			if !ok {
				return nil, fmt.Errorf("route %s (%s): JWT without an authorizer of the template", id, rt.RouteKey)
			}
			azp, err := resolved(n, az)
			if err != nil {
				return nil, err
			}
			jc, _ := azp["JwtConfiguration"].(map[string]any)
			rt.Issuer = str(jc["Issuer"])
			for _, a := range asList(jc["Audience"]) {
				rt.Audience = append(rt.Audience, fmt.Sprint(a))
			}
		}
		integ := integrations[strings.TrimPrefix(str(props["Target"]), "integrations/")]
		if integ == nil {
			return nil, fmt.Errorf("route %s (%s) has no integration", id, rt.RouteKey)
		}
		f := arnToFunction(str(integ["IntegrationUri"]))
		if f == nil {
			return nil, fmt.Errorf("route %s (%s) integrates %v, not a function of the template", id, rt.RouteKey, integ["IntegrationUri"])
		}
		rt.Function, rt.PayloadFormatVersion = f.Name, str(integ["PayloadFormatVersion"])
		s.Routes = append(s.Routes, rt)
	}
	for _, id := range t.OfType("AWS::Lambda::EventSourceMapping") {
		props, err := resolved(n, t.Resources[id])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		f := arnToFunction(str(props["FunctionName"]))
		if f == nil {
			return nil, fmt.Errorf("mapping %s invokes %v, not a function of the template", id, props["FunctionName"])
		}
		m := Mapping{LogicalID: id, Function: f.Name, EventSourceArn: str(props["EventSourceArn"]), BatchSize: num(props["BatchSize"], 100),
			MaximumRetryAttempts: num(props["MaximumRetryAttempts"], -1), MaximumRecordAgeSeconds: num(props["MaximumRecordAgeInSeconds"], -1),
			StartingPosition: str(props["StartingPosition"]), BisectBatchOnFunctionError: props["BisectBatchOnFunctionError"] == true,
			ParallelizationFactor: num(props["ParallelizationFactor"], 1), TumblingWindowInSeconds: num(props["TumblingWindowInSeconds"], 0)}
		if fc, ok := props["FilterCriteria"].(map[string]any); ok {
			for _, fl := range asList(fc["Filters"]) {
				flm, _ := fl.(map[string]any)
				m.Filters = append(m.Filters, str(flm["Pattern"]))
			}
		}
		for _, rt := range asList(props["FunctionResponseTypes"]) {
			m.ReportBatchItemFailures = m.ReportBatchItemFailures || rt == "ReportBatchItemFailures"
		}
		if dc, ok := props["DestinationConfig"].(map[string]any); ok {
			of, _ := dc["OnFailure"].(map[string]any)
			m.OnFailure = str(of["Destination"])
		}
		s.Mappings = append(s.Mappings, m)
	}
	for _, id := range t.OfType("AWS::Events::EventBus") {
		s.Buses[n.Attrs[id]["Arn"]] = Bus{LogicalID: id, Name: n.Refs[id], Arn: n.Attrs[id]["Arn"]}
	}
	busByName := func(name string) (Bus, bool) {
		for _, b := range s.Buses {
			if b.Name == name || b.Arn == name {
				return b, true
			}
		}
		return Bus{}, false
	}
	for _, id := range t.OfType("AWS::Events::EventBusPolicy") {
		props, err := resolved(n, t.Resources[id])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		b, ok := busByName(str(props["EventBusName"]))
		if !ok {
			return nil, fmt.Errorf("bus policy %s is on %v, not a bus of the template", id, props["EventBusName"])
		}
		var stmts []any
		if st, ok := props["Statement"]; ok {
			stmts = asList(st)
		} else if pol, ok := props["Policy"].(map[string]any); ok {
			stmts = asList(pol["Statement"])
		}
		if b.Policy == nil {
			b.Policy = map[string]any{"Version": "2012-10-17", "Statement": []any{}}
		}
		b.Policy["Statement"] = append(b.Policy["Statement"].([]any), stmts...)
		s.Buses[b.Arn] = b
	}
	for _, id := range t.OfType("AWS::Events::Rule") {
		props, err := resolved(n, t.Resources[id])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		rl := Rule{LogicalID: id, Schedule: str(props["ScheduleExpression"])}
		if p, ok := props["EventPattern"]; ok {
			b, _ := json.Marshal(p)
			rl.Pattern = string(b)
			name := str(props["EventBusName"])
			if name == "" {
				name = "default"
			}
			if b, ok := busByName(name); ok {
				rl.BusArn = b.Arn
			} else {
				rl.BusArn = ARN("events", s.Region, "event-bus/"+name)
			}
		}
		for _, tg := range asList(props["Targets"]) {
			tm, _ := tg.(map[string]any)
			f := arnToFunction(str(tm["Arn"]))
			if f == nil {
				return nil, fmt.Errorf("rule %s targets %v: the local stack runs only function targets", id, tm["Arn"])
			}
			for _, k := range []string{"InputPath", "InputTransformer"} {
				if _, ok := tm[k]; ok {
					return nil, fmt.Errorf("rule %s: target %s has %s, which the local stack does not model (Input, or none)", id, f.Name, k)
				}
			}
			rl.Targets = append(rl.Targets, f.Name)
			if in := str(tm["Input"]); in != "" {
				if rl.Inputs == nil {
					rl.Inputs = map[string]string{}
				}
				rl.Inputs[f.Name] = in
			}
		}
		s.Rules = append(s.Rules, rl)
	}
	for _, ty := range []string{"AWS::DynamoDB::Table", "AWS::DynamoDB::GlobalTable"} {
		for _, id := range t.OfType(ty) {
			props, err := resolved(n, t.Resources[id])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", id, err)
			}
			s.Tables[id] = Table{LogicalID: id, Name: n.Refs[id], Properties: props}
		}
	}
	for _, id := range t.OfType("AWS::SQS::Queue") {
		a := n.Attrs[id]
		s.Queues[id] = Queue{LogicalID: id, Name: a["QueueName"], URL: a["QueueUrl"], Arn: a["Arn"]}
	}
	for _, id := range t.OfType("AWS::SSM::Parameter") {
		props, err := resolved(n, t.Resources[id])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		s.Parameters[n.Refs[id]] = str(props["Value"])
	}
	for _, id := range t.OfType("AWS::SecretsManager::Secret") {
		s.Secrets[id] = n.Refs[id]
	}
	sort.Slice(s.Routes, func(i, j int) bool { return s.Routes[i].RouteKey < s.Routes[j].RouteKey })
	return s, nil
}

// refID is the logical id a Ref or Fn::GetAtt names ("" for another value).
func refID(v any) string {
	m, _ := v.(map[string]any)
	if id, ok := m["Ref"].(string); ok {
		return id
	}
	switch a := m["Fn::GetAtt"].(type) {
	case []any:
		if len(a) == 2 {
			return str(a[0])
		}
	case string:
		id, _, _ := strings.Cut(a, ".")
		return id
	}
	return ""
}

// codeName is the functions/ folder a function runs: the construct path's
// segment before Function/Resource ("ExactOnce/Api/Create/Function/Resource").
func codeName(r Resource) string {
	path, _ := r.Metadata["aws:cdk:path"].(string)
	parts := strings.Split(path, "/")
	if len(parts) >= 3 && parts[len(parts)-1] == "Resource" && parts[len(parts)-2] == "Function" {
		return strings.ToLower(parts[len(parts)-3])
	}
	return ""
}

func resolved(n *Names, r Resource) (map[string]any, error) {
	v, err := n.Resolve(map[string]any(r.Properties))
	if err != nil {
		return nil, err
	}
	m, _ := v.(map[string]any)
	return m, nil
}

func asList(v any) []any {
	switch v := v.(type) {
	case nil:
		return nil
	case []any:
		return v
	}
	return []any{v}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any, def int) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case string:
		var i int
		if _, err := fmt.Sscan(x, &i); err == nil {
			return i
		}
	}
	return def
}
