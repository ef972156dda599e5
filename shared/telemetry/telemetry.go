// Package telemetry is what operators see of ExactOnce without reading code:
// metrics in CloudWatch Embedded Metric Format (EMF) written to stdout — one
// JSON line that CloudWatch Logs turns into metrics, with no API call and no
// added latency — plus the per-request DynamoDB request count and the
// cold-start flag the request log line reports.
package telemetry

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

type counterKey struct{}

// WithRequestCounter returns a context in which CountRequests counts the
// DynamoDB requests (retries included) made with it.
func WithRequestCounter(ctx context.Context) (context.Context, *atomic.Int64) {
	n := new(atomic.Int64)
	return context.WithValue(ctx, counterKey{}, n), n
}

// CountRequests is an SDK client API option: it counts each attempt (it sits
// after the retry middleware) into the context's request counter.
func CountRequests(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("exactonceCountRequests",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if n, ok := ctx.Value(counterKey{}).(*atomic.Int64); ok {
				n.Add(1)
			}
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}
