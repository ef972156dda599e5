package faults

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
)

// EntryFault makes EventBridge refuse single entries of a PutEvents
// request, as it does per entry (PutEventsResultEntry.ErrorCode) while it
// accepts the others: the entries whose Detail contains Match (every entry
// when empty) are answered Code, Times times (0: every time), and are not
// forwarded; the rest of the request is.
type EntryFault struct {
	Match string
	Code  string // e.g. "MalformedDetail" (non-retryable) or "ThrottlingException" (retryable)
	Times int
}

// EntryFaults holds the per-entry faults of a proxy and what they refused.
type entryFaults struct {
	mu      sync.Mutex
	faults  []*EntryFault
	left    map[*EntryFault]int
	refused map[string]int // code → entries refused
}

// FailEntries adds a per-entry fault for the proxy's PutEvents requests.
func (p *Proxy) FailEntries(f EntryFault) {
	p.entries.mu.Lock()
	defer p.entries.mu.Unlock()
	if p.entries.left == nil {
		p.entries.left, p.entries.refused = map[*EntryFault]int{}, map[string]int{}
	}
	fc := f
	p.entries.faults = append(p.entries.faults, &fc)
	p.entries.left[&fc] = f.Times
}

// ClearEntryFaults removes every per-entry fault.
func (p *Proxy) ClearEntryFaults() {
	p.entries.mu.Lock()
	defer p.entries.mu.Unlock()
	p.entries.faults, p.entries.left = nil, map[*EntryFault]int{}
}

// EntriesRefused counts the entries refused so far, by error code.
func (p *Proxy) EntriesRefused() map[string]int {
	p.entries.mu.Lock()
	defer p.entries.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.entries.refused {
		out[k] = v
	}
	return out
}

// refuse picks the code an entry is refused with ("" to forward it).
func (e *entryFaults) refuse(detail string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.faults {
		if f.Match != "" && !strings.Contains(detail, f.Match) {
			continue
		}
		if f.Times > 0 {
			if e.left[f] == 0 {
				continue
			}
			e.left[f]--
		}
		e.refused[f.Code]++
		return f.Code
	}
	return ""
}

func (e *entryFaults) active() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.faults) > 0
}

// entryMessages are EventBridge's messages for its per-entry error codes.
var entryMessages = map[string]string{
	"InternalFailure":                     "Internal service failure.",
	"ThrottlingException":                 "Rate exceeded.",
	"AccessDeniedException":               "User is not authorized to perform: events:PutEvents on the event bus.",
	"MalformedDetail":                     "Detail is malformed.",
	"InvalidArgument":                     "Parameter is not valid.",
	"NotAuthorizedForSourceException":     "Not authorized for the source.",
	"NotAuthorizedForDetailTypeException": "Not authorized for the detail type.",
}

// putEventsWithFaults answers a PutEvents request whose entries the faults
// refuse in part: the others are forwarded (when any), and the answer
// merges both in the request's order, as EventBridge answers.
func (p *Proxy) putEventsWithFaults(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if !p.entries.active() || !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".PutEvents") {
		return false
	}
	var in map[string]json.RawMessage
	if json.Unmarshal(body, &in) != nil {
		return false
	}
	var entries []map[string]any
	if json.Unmarshal(in["Entries"], &entries) != nil {
		return false
	}
	codes := make([]string, len(entries))
	var forward []map[string]any
	for i, e := range entries {
		detail, _ := e["Detail"].(string)
		if codes[i] = p.entries.refuse(detail); codes[i] == "" {
			forward = append(forward, e)
		}
	}
	if len(forward) == len(entries) {
		return false // nothing refused: the request goes through as it is
	}
	var results []map[string]any
	if len(forward) > 0 {
		in["Entries"], _ = json.Marshal(forward)
		fwd, _ := json.Marshal(in)
		out, err := http.NewRequestWithContext(r.Context(), r.Method, p.Target+r.URL.RequestURI(), bytes.NewReader(fwd))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return true
		}
		out.Header = r.Header.Clone()
		out.Header.Del("Content-Length")
		resp, err := p.client.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return true
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = w.Write(answer)
			return true
		}
		var res struct{ Entries []map[string]any }
		_ = json.Unmarshal(answer, &res)
		results = res.Entries
	}
	merged := make([]map[string]any, len(entries))
	failed := 0
	for i := range entries {
		if codes[i] != "" {
			merged[i] = map[string]any{"ErrorCode": codes[i], "ErrorMessage": entryMessages[codes[i]]}
			failed++
			continue
		}
		if len(results) == 0 {
			merged[i] = map[string]any{"ErrorCode": "InternalFailure", "ErrorMessage": entryMessages["InternalFailure"]}
			failed++
			continue
		}
		merged[i], results = results[0], results[1:]
		if _, ok := merged[i]["ErrorCode"]; ok {
			failed++
		}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(map[string]any{"FailedEntryCount": failed, "Entries": merged})
	return true
}
