package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/action"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/store"
)

// consumeFn runs one design's consume: key is the logical call's key.
type consumeFn func(key, id string) Outcome

// contender is one consume in the throughput comparison: a design of the
// requests-per-outcome table, or a step of the breakdown.
type contender struct {
	name string
	fn   consumeFn
	// forgets: the design keeps no record of a call, so a retry is
	// answered like a second consume.
	forgets bool
	// unindexed: its actions are not in the expiry index (the
	// alternatives keep none).
	unindexed bool
	// step: a step of the breakdown, not a design (no outcome counts).
	step bool
}

// stepRow is one step of the breakdown from (a) to ExactOnce's consume:
// what one consume pair (a first consume and a duplicate) costs, and the
// throughput.
type stepRow struct {
	Step string `json:"step"`
	// Requests, request and response body bytes, and CPU time of DynamoDB
	// Local and of this process (the SDK's client and the design's code),
	// per pair, summed over every round.
	Requests float64 `json:"requestsPerPair"`
	Bytes    float64 `json:"bodyBytesPerPair"`
	LocalMs  float64 `json:"dynamodbLocalCpuMsPerPair"`
	ClientMs float64 `json:"clientCpuMsPerPair"`
	// OpsPerSecond is the median over the rounds; OverA the median of the
	// per-round ratios to (a)'s ops/s, with their range.
	OpsPerSecond float64 `json:"opsPerSecond"`
	OverA        float64 `json:"overA"`
	OverAMin     float64 `json:"overAMin"`
	OverAMax     float64 `json:"overAMax"`
}

// benchRounds is how many rounds the throughput comparison runs:
// EXACTONCE_BENCH_ROUNDS, default one per contender, so that each runs once
// in every position.
func benchRounds(t *testing.T, contenders int) int {
	if v := os.Getenv("EXACTONCE_BENCH_ROUNDS"); v != "" {
		r, err := strconv.Atoi(v)
		if err != nil || r < 1 {
			t.Fatalf("EXACTONCE_BENCH_ROUNDS=%q", v)
		}
		return r
	}
	return contenders
}

// designs counts requests per consume outcome for ExactOnce and the two
// alternatives on the same table, then compares their throughput with the
// steps of the breakdown from (a) to ExactOnce: in rounds, each contender
// once per round on fresh actions, the order rotated each round so that
// every contender runs in every position; a ratio is taken between runs of
// the same round, and reported as the median over the rounds with its
// range. The clients are warmed (connections open, DynamoDB Local's code
// paths compiled) by an unmeasured round first.
func designs(t *testing.T, env *testkit.Env, n int) ([]designRow, []stepRow) {
	ctx := context.Background()
	cfg := awsconfig.Local(testkit.Endpoint)
	bodies := &bodyMeter{next: cfg.HTTPClient}
	counter := testkit.NewCounter(bodies)
	cfg.HTTPClient = counter
	capacity := testkit.NewCapacity()
	capacity.Attach(&cfg)
	db := dynamodb.NewFromConfig(cfg)
	st := store.New(db, env.Table, store.Options{})
	idem := env.Table + "-idem"
	if err := CreateIdemTable(ctx, db, idem); err != nil {
		t.Fatal(err)
	}
	wtr := &WriteThenRead{DB: db, Table: env.Table}
	claim := &ClaimRecord{DB: db, IdemTable: idem, Op: wtr}
	prev := &PreviousRelease{DB: db, Table: env.Table}

	now := time.Now()
	mk := func(id string, mut func(*action.Action)) {
		a := &action.Action{ID: id, UserID: "u", ActiveAt: action.Millis(now.Add(-time.Minute)), ExpiresAt: action.Millis(now.Add(time.Hour)), CreatedAt: action.Millis(now)}
		if mut != nil {
			mut(a)
		}
		if _, err := st.Create(ctx, a, nil); err != nil {
			t.Error(err)
		}
	}
	total := func() int {
		s := 0
		for _, c := range counter.Take() {
			s += c
		}
		return s
	}
	failed := func(err error) { // from the workers: the run goes on, the test fails
		t.Error(err)
	}
	ours := func(key, id string) Outcome {
		_, err := st.Consume(ctx, id, store.Consume{Reason: "b", Write: action.Write{Key: key, Fingerprint: "fp", RequestID: key}, Fingerprints: []string{"fp"}, Now: time.Now()})
		var rej *action.Rejection
		var rep *action.Replay
		switch {
		case err == nil, errors.As(err, &rep):
			return "consumed"
		case errors.As(err, &rej):
			return Outcome(rej.Code)
		}
		failed(err)
		return ""
	}
	run := func(f func(context.Context, string, string, string, time.Time) (Outcome, error)) consumeFn {
		return func(key, id string) Outcome {
			o, err := f(ctx, key, id, "b", time.Now())
			if err != nil {
				failed(err)
			}
			return o
		}
	}
	forget := func(f func(context.Context, string, string, time.Time) (Outcome, error)) func(context.Context, string, string, string, time.Time) (Outcome, error) {
		return func(ctx context.Context, _, id, reason string, now time.Time) (Outcome, error) {
			return f(ctx, id, reason, now)
		}
	}
	step := func(s Step) consumeFn { s.DB, s.Table = db, env.Table; return run(s.Consume) }
	cs := []contender{
		{"ExactOnce (one conditional write, ALL_OLD)", ours, false, false, false},
		{"ExactOnce, previous release (the write also removed expShard)", run(forget(prev.Consume)), true, false, false},
		{"(a) write, then read on failure (seed 000)", run(forget(wtr.Consume)), true, true, false},
		{"(b) claim record + complete + get (seed 001, Powertools)", run(claim.Consume), false, true, false},
		{"(a) + a failed condition returns the item (ALL_OLD), no read", step(Step{OneRequest: true}), true, true, true},
		{"+ ExactOnce's whole condition (not expired, no PIN, single use, no key set)", step(Step{OneRequest: true, Guards: true}), true, true, true},
		{"+ the call's record (key, fingerprint, request id) and the TTL", step(Step{OneRequest: true, Guards: true, Record: true}), false, true, true},
		{"+ the answer (ReturnValues=ALL_NEW, decoded)", step(Step{OneRequest: true, Guards: true, Record: true, Answer: true}), false, true, true},
		{"+ the action in the expiry index (= ExactOnce's request, built by hand)", step(Step{OneRequest: true, Guards: true, Record: true, Answer: true}), false, false, true},
	}
	const ours0, a0 = 0, 2 // ExactOnce's and (a)'s places in cs

	var rows []designRow
	for i, d := range cs {
		if d.step {
			continue
		}
		p := fmt.Sprintf("d%d-", i)
		mk(p+"fresh", nil)
		mk(p+"canceled", nil)
		if _, err := st.Cancel(ctx, p+"canceled", store.Cancel{Now: now}); err != nil {
			t.Fatal(err)
		}
		mk(p+"pending", func(x *action.Action) {
			x.ActiveAt = action.Millis(now.Add(time.Hour))
			x.ExpiresAt = action.Millis(now.Add(2 * time.Hour))
		})
		mk(p+"expired", func(x *action.Action) { x.ExpiresAt = action.Millis(now.Add(-time.Second)) })
		counter.Take()
		capacity.Take()
		row := designRow{Design: d.name}
		count := func(want Outcome, key, id string) int {
			if got := d.fn(key, id); got != want && !(want == "replay" && (got == "consumed" || d.forgets && got == "already_used")) {
				t.Errorf("%s: %s got %s, want %s", d.name, id, got, want)
			}
			return total()
		}
		row.Consumed = count("consumed", p+"k1", p+"fresh")
		row.TableWrites, row.IndexWrites, row.Reads = splitUnits(capacity.Take())
		row.Replay = count("replay", p+"k1", p+"fresh") // (a) has no memory of the call: it answers already_used
		row.AlreadyUsed = count("already_used", p+"k2", p+"fresh")
		row.Expired = count("expired", p+"k3", p+"expired")
		row.Canceled = count("canceled", p+"k4", p+"canceled")
		row.NotActive = count("not_active", p+"k5", p+"pending")
		row.NotFound = count("action_not_found", p+"k6", p+"none")
		capacity.Take()
		rows = append(rows, row)
	}

	// Throughput: per round, each contender consumes its own fresh actions,
	// each by two calls (the second a duplicate with its own key: refused,
	// already_used), 8 workers.
	const workers = 8
	java := localPID(testkit.Endpoint)
	type measure struct {
		ops, requests, bytes int64
		wall, local, client  time.Duration
	}
	consumePairs := func(r, i, size int) measure {
		d := cs[i]
		ids := make([]string, size)
		for j := range ids {
			ids[j] = fmt.Sprintf("tp%d-%d-%d", r, i, j)
		}
		parallel(workers, ids, func(id string) { // setup, not measured
			mk(id, nil)
			if d.unindexed {
				unindex(t, db, env.Table, id)
			}
		})
		work := append(append([]string(nil), ids...), ids...)
		var seq sync.Map
		var mu sync.Mutex
		got := map[string][]Outcome{}
		counter.Take()
		sent0, recv0 := bodies.sent.Load(), bodies.recv.Load()
		local0, client0 := processCPU(java), selfCPU()
		start := time.Now()
		parallel(workers, work, func(id string) {
			k := id + "-1"
			if _, loaded := seq.LoadOrStore(id, true); loaded {
				k = id + "-2"
			}
			o := d.fn(k, id)
			mu.Lock()
			got[id] = append(got[id], o)
			mu.Unlock()
		})
		m := measure{ops: int64(len(work)), wall: time.Since(start), local: processCPU(java) - local0, client: selfCPU() - client0,
			bytes: bodies.sent.Load() - sent0 + bodies.recv.Load() - recv0}
		// The two calls of an action may overlap (8 workers): one consumes,
		// whichever DynamoDB took first, and the other is refused.
		for _, id := range ids {
			if o := slices.Sorted(slices.Values(got[id])); !slices.Equal(o, []Outcome{"already_used", "consumed"}) && !slices.Contains(o, "") {
				t.Errorf("%s: %s got %v, want one consumed and one already_used", d.name, id, o)
			}
		}
		for _, c := range counter.Take() {
			m.requests += int64(c)
		}
		capacity.Take()
		return m
	}
	// Each run: size fresh actions, 2×size consumes (n/4: about a second on
	// this machine at N = 2000, so the runs of a round share its conditions).
	size := max(n/4, 10)
	// Warm-up, not in the figures: connections opened, DynamoDB Local's
	// paths compiled. It runs in the fixed order the comparison used to be
	// measured in (ExactOnce first, on this fresh client, each once), so its
	// ratios show what that order did to them.
	warm := make([]float64, len(cs))
	for i := range cs {
		m := consumePairs(-1, i, size)
		warm[i] = float64(m.ops) / m.wall.Seconds()
	}
	rounds := benchRounds(t, len(cs))
	ops := make([][]float64, len(cs)) // contender → ops/s per round
	sum := make([]measure, len(cs))
	for r := range rounds {
		for pos := range cs {
			i := (pos + r) % len(cs) // rotated: each in every position over len(cs) rounds
			m := consumePairs(r, i, size)
			ops[i] = append(ops[i], float64(m.ops)/m.wall.Seconds())
			s := &sum[i]
			s.ops, s.requests, s.bytes, s.wall, s.local, s.client = s.ops+m.ops, s.requests+m.requests, s.bytes+m.bytes, s.wall+m.wall, s.local+m.local, s.client+m.client
		}
	}
	// ratio is the median, min and max over the rounds of x's ops/s over y's.
	ratio := func(x, y int) (med, lo, hi float64) {
		q := make([]float64, rounds)
		for r := range rounds {
			q[r] = ops[x][r] / ops[y][r]
		}
		slices.Sort(q)
		return round(median(q), 2), round(q[0], 2), round(q[len(q)-1], 2)
	}
	opsMedian := func(i int) float64 { return round(median(slices.Sorted(slices.Values(ops[i]))), 0) }
	for k, i := 0, 0; i < len(cs); i++ {
		if cs[i].step {
			continue
		}
		rows[k].OpsPerSecond = opsMedian(i)
		rows[k].Ratio, rows[k].RatioMin, rows[k].RatioMax = ratio(ours0, i)
		rows[k].WarmupOpsPerSecond = round(warm[i], 0)
		rows[k].WarmupRatio = round(warm[ours0]/warm[i], 2)
		rows[k].Rounds = rounds
		k++
	}
	var steps []stepRow
	for _, i := range append([]int{a0}, 4, 5, 6, 7, 8, ours0) {
		s, pairs := sum[i], float64(sum[i].ops)/2
		row := stepRow{Step: cs[i].name, Requests: round(float64(s.requests)/pairs, 2), Bytes: round(float64(s.bytes)/pairs, 0),
			LocalMs: round(float64(s.local.Microseconds())/1000/pairs, 3), ClientMs: round(float64(s.client.Microseconds())/1000/pairs, 3),
			OpsPerSecond: opsMedian(i)}
		if java == 0 {
			row.LocalMs = -1
		}
		row.OverA, row.OverAMin, row.OverAMax = ratio(i, a0)
		if i == ours0 {
			row.Step = "= ExactOnce's store.Consume (its update builder, decode and classification)"
		}
		steps = append(steps, row)
	}
	return rows, steps
}

// median of sorted values.
func median(sorted []float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	m := len(sorted) / 2
	if len(sorted)%2 == 0 {
		return (sorted[m-1] + sorted[m]) / 2
	}
	return sorted[m]
}

// bodyMeter counts the bytes of request and response bodies crossing an
// SDK client.
type bodyMeter struct {
	next       aws.HTTPClient
	sent, recv atomic.Int64
}

func (m *bodyMeter) Do(r *http.Request) (*http.Response, error) {
	if r.ContentLength > 0 {
		m.sent.Add(r.ContentLength)
	}
	resp, err := m.next.Do(r)
	if resp != nil && resp.Body != nil {
		resp.Body = &countedBody{ReadCloser: resp.Body, n: &m.recv}
	}
	return resp, err
}

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

// selfCPU is the CPU time this process has used (user and system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// localPID finds the DynamoDB Local serving endpoint among this machine's
// processes (a java process given its port), 0 if none is found.
func localPID(endpoint string) int {
	u, err := url.Parse(endpoint)
	if err != nil {
		return 0
	}
	want := "\x00-port\x00" + u.Port() + "\x00"
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "DynamoDBLocal.jar") && strings.Contains(string(b), want) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	return 0
}

// processCPU is the CPU time process pid has used (utime + stime of
// /proc/pid/stat, in clock ticks of 10 ms), 0 if it cannot be read.
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // after the command name: state is field 3
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// unindexed takes an action out of the expiry index (setup, not measured).
func unindex(t *testing.T, db *dynamodb.Client, table, id string) {
	_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: &table, Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: id}},
		UpdateExpression: aws.String("REMOVE expShard"),
	})
	if err != nil {
		t.Error(err)
	}
}
