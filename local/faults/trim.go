package faults

import (
	"encoding/json"
	"net/http"
	"strings"
)

// TrimNextIterator makes the shard iterator of the next GetRecords answer
// TrimmedDataAccessException to that request and to every later one that
// carries it, as DynamoDB Local has been seen to do with an iterator it
// trimmed under load: the iterator is dead, and only a new one reads on.
func (p *Proxy) TrimNextIterator() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trimNext = true
}

// trimmed answers a GetRecords whose iterator is trimmed (true), marking
// the iterator first when one is to be.
func (p *Proxy) trimmed(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".GetRecords") {
		return false
	}
	var in struct{ ShardIterator string }
	if json.Unmarshal(body, &in) != nil || in.ShardIterator == "" {
		return false
	}
	p.mu.Lock()
	if p.trimNext {
		p.trimNext = false
		if p.trimmedIterators == nil {
			p.trimmedIterators = map[string]bool{}
		}
		p.trimmedIterators[in.ShardIterator] = true
	}
	dead := p.trimmedIterators[in.ShardIterator]
	p.mu.Unlock()
	if dead {
		p.counts.trimmed.Add(1)
		awsError(w, http.StatusBadRequest, "com.amazonaws.dynamodb.v20120810#TrimmedDataAccessException",
			"The operation attempted to read past the oldest stream record in a shard.")
	}
	return dead
}
