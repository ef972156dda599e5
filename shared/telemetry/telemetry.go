// Package telemetry is what operators see of ExactOnce without reading code:
// metrics in CloudWatch Embedded Metric Format (EMF) written to stdout — one
// JSON line that CloudWatch Logs turns into metrics, with no API call and no
// added latency — plus the per-request DynamoDB request count and the
// cold-start flag the request log line reports.
package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// Namespace of every ExactOnce metric.
const Namespace = "ExactOnce"

// Units (the subset of CloudWatch's that ExactOnce uses).
const (
	Count        = "Count"
	Milliseconds = "Milliseconds"
)

// Dim is one dimension of a metric.
type Dim struct{ Name, Value string }

// Value is one metric datapoint.
type Value struct {
	Name  string
	Unit  string
	Value float64
}

// Metrics writes EMF documents and keeps running totals (served locally at
// GET /_local/metrics). A nil *Metrics records nothing.
type Metrics struct {
	out io.Writer
	now func() time.Time

	mu     sync.Mutex
	totals map[string]*Total
}

// Total aggregates the datapoints of one metric under one set of dimensions.
type Total struct {
	Metric     string            `json:"metric"`
	Unit       string            `json:"unit"`
	Dimensions map[string]string `json:"dimensions"`
	Count      int               `json:"count"` // datapoints
	Sum        float64           `json:"sum"`
	Max        float64           `json:"max"`
}

// New returns Metrics writing one EMF line per Emit to out.
func New(out io.Writer) *Metrics {
	return &Metrics{out: out, now: time.Now, totals: map[string]*Total{}}
}

// Emit records values as one EMF document, published under every prefix of
// dims: with Route then Outcome, a metric is read per route and per route
// and outcome. Dimensions must stay low-cardinality (route, outcome,
// function; never ids): each distinct combination is a CloudWatch metric.
func (m *Metrics) Emit(dims []Dim, values ...Value) {
	if m == nil || len(values) == 0 {
		return
	}
	keys := make([]string, len(dims))
	sets := make([][]string, len(dims))
	for i, d := range dims {
		keys[i] = d.Name
		sets[i] = keys[:i+1]
	}
	if len(sets) == 0 {
		sets = [][]string{{}}
	}

	doc := make(map[string]any, len(dims)+len(values)+1)
	defs := make([]map[string]string, len(values))
	for i, v := range values {
		defs[i] = map[string]string{"Name": v.Name, "Unit": v.Unit}
		doc[v.Name] = v.Value
	}
	for _, d := range dims {
		doc[d.Name] = d.Value
	}
	doc["_aws"] = map[string]any{
		"Timestamp": m.now().UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  Namespace,
			"Dimensions": sets,
			"Metrics":    defs,
		}},
	}
	line, err := json.Marshal(doc)
	if err != nil {
		return // only NaN or Inf values can fail; they are not metrics
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	_, _ = m.out.Write(append(line, '\n')) // best effort: a request never fails for its metrics
	for _, v := range values {
		id := v.Name + "|" + joinDims(dims)
		t := m.totals[id]
		if t == nil {
			dm := make(map[string]string, len(dims))
			for _, d := range dims {
				dm[d.Name] = d.Value
			}
			t = &Total{Metric: v.Name, Unit: v.Unit, Dimensions: dm}
			m.totals[id] = t
		}
		t.Count++
		t.Sum += v.Value
		t.Max = max(t.Max, v.Value)
	}
}

// Totals returns the running totals, sorted by metric and dimensions.
func (m *Metrics) Totals() []Total {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.totals))
	for id := range m.totals {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]Total, len(ids))
	for i, id := range ids {
		out[i] = *m.totals[id]
	}
	return out
}

func joinDims(dims []Dim) string {
	var b strings.Builder
	for _, d := range dims {
		b.WriteString(d.Name + "=" + d.Value + ";")
	}
	return b.String()
}

// coldStart is cleared by the first ColdStart call of the process.
var coldStart atomic.Bool

func init() { coldStart.Store(true) }

// ColdStart reports true exactly once per process: for its first request.
func ColdStart() bool { return coldStart.Swap(false) }

type usageKey struct{}

// Usage is one request's use of DynamoDB, counted by MeterDynamoDB: its
// attempts (retries included), the write units DynamoDB reported for its
// writes (ReturnConsumedCapacity), and its conditional writes whose
// condition failed (DynamoDB reports no capacity for those; it bills each
// like a write of the item).
type Usage struct {
	requests     atomic.Int64
	writeMilli   atomic.Int64 // write units × 1000
	failedWrites atomic.Int64
}

// Requests is the DynamoDB attempts made.
func (u *Usage) Requests() int64 { return u.requests.Load() }

// WriteUnits is the write capacity DynamoDB reported.
func (u *Usage) WriteUnits() float64 { return float64(u.writeMilli.Load()) / 1000 }

// FailedWrites is the conditional writes refused by their condition.
func (u *Usage) FailedWrites() int64 { return u.failedWrites.Load() }

// WithUsage returns a context in which MeterDynamoDB counts the DynamoDB
// use of the calls made with it.
func WithUsage(ctx context.Context) (context.Context, *Usage) {
	u := new(Usage)
	return context.WithValue(ctx, usageKey{}, u), u
}

// MeterDynamoDB is an SDK client API option: it counts each attempt (after
// the retry middleware) into the context's Usage, asks DynamoDB for the
// consumed capacity of every write that does not ask already (TOTAL), and
// adds what each reports.
func MeterDynamoDB(stack *middleware.Stack) error {
	err := stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("exactonceCountRequests",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if u, ok := ctx.Value(usageKey{}).(*Usage); ok {
				u.requests.Add(1)
			}
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
	if err != nil {
		return err
	}
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("exactonceWriteUnits",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			u, ok := ctx.Value(usageKey{}).(*Usage)
			if !ok {
				return next.HandleInitialize(ctx, in)
			}
			askCapacity(in.Parameters)
			out, md, err := next.HandleInitialize(ctx, in)
			var ccf *types.ConditionalCheckFailedException
			switch {
			case errors.As(err, &ccf):
				u.failedWrites.Add(1)
			case err == nil:
				for _, c := range writeCapacity(out.Result) {
					u.writeMilli.Add(int64(aws.ToFloat64(c.CapacityUnits)*1000 + 0.5))
				}
			}
			return out, md, err
		}), middleware.After)
}

// askCapacity sets ReturnConsumedCapacity on a write that leaves it unset.
func askCapacity(params any) {
	switch p := params.(type) {
	case *dynamodb.UpdateItemInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		}
	case *dynamodb.PutItemInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		}
	case *dynamodb.DeleteItemInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		}
	case *dynamodb.BatchWriteItemInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		}
	case *dynamodb.TransactWriteItemsInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		}
	}
}

// writeCapacity is the capacity a write's output reports.
func writeCapacity(result any) []types.ConsumedCapacity {
	one := func(c *types.ConsumedCapacity) []types.ConsumedCapacity {
		if c == nil {
			return nil
		}
		return []types.ConsumedCapacity{*c}
	}
	switch r := result.(type) {
	case *dynamodb.UpdateItemOutput:
		return one(r.ConsumedCapacity)
	case *dynamodb.PutItemOutput:
		return one(r.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		return one(r.ConsumedCapacity)
	case *dynamodb.BatchWriteItemOutput:
		return r.ConsumedCapacity
	case *dynamodb.TransactWriteItemsOutput:
		return r.ConsumedCapacity
	}
	return nil
}
