package faults

import (
	"encoding/json"
	"net/http"
	"strings"
)

// LeaveUnprocessed answers the next n BatchGetItem requests with every key
// they asked for unprocessed and nothing read, as DynamoDB answers a batch
// it throttled (200, UnprocessedKeys): the caller must ask again.
func (p *Proxy) LeaveUnprocessed(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unprocessed = n
}

// leftUnprocessed answers a BatchGetItem with its keys unprocessed (true)
// while LeaveUnprocessed's count lasts.
func (p *Proxy) leftUnprocessed(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".BatchGetItem") {
		return false
	}
	p.mu.Lock()
	leave := p.unprocessed > 0
	if leave {
		p.unprocessed--
	}
	p.mu.Unlock()
	if !leave {
		return false
	}
	var in struct{ RequestItems json.RawMessage }
	if json.Unmarshal(body, &in) != nil {
		return false
	}
	p.counts.unprocessed.Add(1)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_, _ = w.Write([]byte(`{"Responses":{},"UnprocessedKeys":` + string(in.RequestItems) + `}`))
	return true
}
