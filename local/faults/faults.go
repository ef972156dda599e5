// Package faults is a fault-injecting HTTP proxy for AWS JSON APIs
// (DynamoDB, EventBridge) on loopback: in front of DynamoDB Local or the
// local bus it answers some requests with throttling or a 500 without
// forwarding them, and forwards others but drops the connection instead of
// returning the answer, so the caller cannot know the write was applied. It
// can also answer ReplicatedWriteConflictException without forwarding, as an
// MRSC table does to a write on an item another Region is modifying.
package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// Rates are the probabilities, per request, of each fault.
type Rates struct {
	Throttle    float64 // 400 ThrottlingException, not forwarded
	ServerError float64 // 500 InternalServerError, not forwarded
	DropAfter   float64 // forwarded, then the connection is closed unanswered
	Conflict    float64 // 400 ReplicatedWriteConflictException, not forwarded
}

// Counts are the faults injected so far.
type Counts struct {
	Requests, Throttled, ServerErrors, Dropped, Unavailable, Conflicts int64
	// Trimmed counts the GetRecords answered TrimmedDataAccessException
	// (TrimNextIterator).
	Trimmed int64
	// HotItem counts the writes refused because their item was over the
	// LimitItemWrites rate.
	HotItem int64
	// Unprocessed counts the BatchGetItems answered with every key
	// unprocessed (LeaveUnprocessed).
	Unprocessed int64
}

// Proxy forwards to Target, injecting faults into requests whose
// X-Amz-Target matches one of Operations (all when empty).
type Proxy struct {
	Target     string   // e.g. http://127.0.0.1:8000
	Operations []string // X-Amz-Target suffixes, e.g. "UpdateItem"
	Rates      Rates

	mu     sync.Mutex
	rnd    *rand.Rand
	counts struct {
		requests, throttled, serverErrors, dropped, unavailable, conflicts, hot, trimmed, unprocessed atomic.Int64
	}
	hotMu     sync.Mutex
	hotRate   float64
	hotItems  map[string]*bucket
	down      atomic.Bool
	lose      atomic.Bool
	plan      []fault // the next matching requests' faults (none passes)
	meanwhile func()  // Meanwhile's, run before the next matching request
	// trimNext and trimmedIterators: TrimNextIterator (trim.go).
	trimNext         bool
	trimmedIterators map[string]bool
	unprocessed      int // LeaveUnprocessed (unprocessed.go)
	client           *http.Client
	srv              *http.Server
	// URL is the proxy's endpoint.
	URL string
	// entries refuses single PutEvents entries (entries.go).
	entries entryFaults
}

// Start serves the proxy on a free loopback port; seed makes the fault
// sequence repeatable for a given request order.
func Start(target string, rates Rates, seed uint64, operations ...string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Target: strings.TrimSuffix(target, "/"), Operations: operations, Rates: rates,
		rnd:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}},
		URL:    "http://" + ln.Addr().String()}
	p.srv = &http.Server{Handler: p}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close stops the proxy.
func (p *Proxy) Close() { _ = p.srv.Close() }

// Counts returns the faults injected so far.
func (p *Proxy) Counts() Counts {
	return Counts{Requests: p.counts.requests.Load(), Throttled: p.counts.throttled.Load(),
		ServerErrors: p.counts.serverErrors.Load(), Dropped: p.counts.dropped.Load(), Unavailable: p.counts.unavailable.Load(),
		Conflicts: p.counts.conflicts.Load(), HotItem: p.counts.hot.Load(), Trimmed: p.counts.trimmed.Load(),
		Unprocessed: p.counts.unprocessed.Load()}
}

// Down makes the target unavailable (true) or available again (false): while
// down, every matching request is answered 503 ServiceUnavailable without
// being forwarded, as during an outage of the service.
func (p *Proxy) Down(down bool) { p.down.Store(down) }

// Lose makes the proxy accept every PutEvents entry without forwarding it
// (true): events lost on purpose after the publisher saw them accepted.
func (p *Proxy) Lose(lose bool) { p.lose.Store(lose) }

func (p *Proxy) String() string {
	c := p.Counts()
	return fmt.Sprintf("%d requests: %d throttled, %d 500s, %d dropped after forwarding, %d unavailable, %d write conflicts, %d hot-item throttles",
		c.Requests, c.Throttled, c.ServerErrors, c.Dropped, c.Unavailable, c.Conflicts, c.HotItem)
}

type fault int

const (
	none fault = iota
	unavailable
	throttle
	serverError
	dropAfter
	conflict
)

func (p *Proxy) pick(r *http.Request) fault {
	if len(p.Operations) > 0 {
		target, match := r.Header.Get("X-Amz-Target"), false
		for _, op := range p.Operations {
			match = match || strings.HasSuffix(target, "."+op)
		}
		if !match {
			return none
		}
	}
	p.counts.requests.Add(1)
	p.mu.Lock()
	meanwhile := p.meanwhile
	p.meanwhile = nil
	p.mu.Unlock()
	if meanwhile != nil {
		meanwhile()
	}
	if p.down.Load() {
		return unavailable
	}
	p.mu.Lock()
	if len(p.plan) > 0 {
		f := p.plan[0]
		p.plan = p.plan[1:]
		p.mu.Unlock()
		return f
	}
	x := p.rnd.Float64()
	rt := p.Rates
	p.mu.Unlock()
	switch {
	case x < rt.Throttle:
		return throttle
	case x < rt.Throttle+rt.ServerError:
		return serverError
	case x < rt.Throttle+rt.ServerError+rt.DropAfter:
		return dropAfter
	case x < rt.Throttle+rt.ServerError+rt.DropAfter+rt.Conflict:
		return conflict
	}
	return none
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if p.hotItem(r, body) {
		hotItemError(w)
		return
	}
	if p.trimmed(w, r, body) || p.leftUnprocessed(w, r, body) {
		return
	}
	f := p.pick(r)
	if p.lose.Load() && strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".PutEvents") {
		var in struct{ Entries []json.RawMessage }
		_ = json.Unmarshal(body, &in)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		out := `{"FailedEntryCount":0,"Entries":[`
		for i := range in.Entries {
			if i > 0 {
				out += ","
			}
			out += `{"EventId":"lost"}`
		}
		_, _ = io.WriteString(w, out+"]}")
		return
	}
	switch f {
	case unavailable:
		p.counts.unavailable.Add(1)
		awsError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "Service is unavailable.")
		return
	case throttle:
		p.counts.throttled.Add(1)
		awsError(w, http.StatusBadRequest, "com.amazonaws.dynamodb.v20120810#ThrottlingException", "Rate of requests exceeds the allowed throughput.")
		return
	case serverError:
		p.counts.serverErrors.Add(1)
		awsError(w, http.StatusInternalServerError, "com.amazonaws.dynamodb.v20120810#InternalServerError", "Internal server error")
		return
	case conflict:
		p.counts.conflicts.Add(1)
		awsError(w, http.StatusBadRequest, "com.amazonaws.dynamodb.v20120810#ReplicatedWriteConflictException",
			"One or more items in this request are being modified by a request in another Region.")
		return
	}
	if f == none && p.putEventsWithFaults(w, r, body) {
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.Target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := p.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if f == dropAfter {
		p.counts.dropped.Add(1)
		// The target has acted; the caller never hears of it.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

func awsError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"__type":%q,"message":%q}`, typ, msg)
}

// Meanwhile runs f once, before the next request of the proxy's operations
// is answered or forwarded: what another caller (another Region's writer)
// does at that moment. The request waits for f.
func (p *Proxy) Meanwhile(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.meanwhile = f
}

// SetRates changes the fault rates of a running proxy.
func (p *Proxy) SetRates(r Rates) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Rates = r
}

// PassThenDrop plans the next matching requests, whatever the rates: pass
// of them are answered normally, then drop are forwarded and lose their
// answer (connection closed): a deterministic "the write applied, the
// caller never heard" for the n-th write of an operation.
func (p *Proxy) PassThenDrop(pass, drop int) { p.passThen(pass, drop, dropAfter) }

// PassThenConflict plans the next matching requests, whatever the rates:
// pass of them are answered normally, then conflicts are answered
// ReplicatedWriteConflictException without being forwarded (nothing
// applied), as an MRSC table answers a write racing one from another Region.
func (p *Proxy) PassThenConflict(pass, conflicts int) { p.passThen(pass, conflicts, conflict) }

// PassThenFail plans the next matching requests, whatever the rates: pass
// of them are answered normally, then fail are answered 500
// InternalServerError without being forwarded (nothing applied): a write
// that fails after the one before it landed (the SDK's retries included,
// when fail covers its attempts).
func (p *Proxy) PassThenFail(pass, fail int) { p.passThen(pass, fail, serverError) }

// passThen plans pass requests answered normally, then n with fault f.
func (p *Proxy) passThen(pass, n int, f fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plan = p.plan[:0]
	for range pass {
		p.plan = append(p.plan, none)
	}
	for range n {
		p.plan = append(p.plan, f)
	}
}
