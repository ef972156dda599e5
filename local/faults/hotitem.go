package faults

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// A DynamoDB partition takes at most 1,000 write units a second; an item
// written faster than that (a hot key) is throttled, whatever the table's
// capacity: ProvisionedThroughputExceededException with the throttling
// reason TableWriteKeyRangeThroughputExceeded, in on-demand mode too, and
// the SDK backs off and retries. LimitItemWrites scales that limit down so
// a test can show where one item stops and a design that spreads its
// writes does not.

// LimitItemWrites throttles the writes (UpdateItem, PutItem, DeleteItem)
// to any one item, by its partition key value, beyond perSecond: a token
// bucket per item holding one second's worth. 0 removes the limit. Every
// write attempt takes a token, answered or refused by its condition alike
// (DynamoDB bills and counts both).
func (p *Proxy) LimitItemWrites(perSecond float64) {
	p.hotMu.Lock()
	defer p.hotMu.Unlock()
	p.hotRate, p.hotItems = perSecond, map[string]*bucket{}
}

type bucket struct {
	tokens float64
	last   time.Time
}

// hotItem reports whether the write in body goes to an item over its
// limit (and takes a token when it is not).
func (p *Proxy) hotItem(r *http.Request, body []byte) bool {
	target := r.Header.Get("X-Amz-Target")
	if !strings.HasSuffix(target, ".UpdateItem") && !strings.HasSuffix(target, ".PutItem") && !strings.HasSuffix(target, ".DeleteItem") {
		return false
	}
	p.hotMu.Lock()
	defer p.hotMu.Unlock()
	if p.hotRate <= 0 {
		return false
	}
	var in struct {
		TableName string
		Key, Item map[string]json.RawMessage
	}
	if json.Unmarshal(body, &in) != nil {
		return false
	}
	key := in.Key
	if key == nil {
		key = in.Item
	}
	id := in.TableName + "\x00" + string(key["actionId"])
	now := time.Now()
	b := p.hotItems[id]
	if b == nil {
		b = &bucket{tokens: p.hotRate, last: now}
		p.hotItems[id] = b
	}
	b.tokens = min(p.hotRate, b.tokens+now.Sub(b.last).Seconds()*p.hotRate)
	b.last = now
	if b.tokens < 1 {
		p.counts.hot.Add(1)
		return true
	}
	b.tokens--
	return false
}

// hotItemError is DynamoDB's answer to a write to a hot item.
func hotItemError(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",` +
		`"message":"Throughput exceeds the current throughput limit for your account, table, or partition.",` +
		`"ThrottlingReasons":[{"reason":"TableWriteKeyRangeThroughputExceeded"}]}`))
}
