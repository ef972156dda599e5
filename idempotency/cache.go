package idempotency

import (
	"container/list"
	"sync"
	"time"
)

// Cache is an opt-in, bounded, in-memory cache of completed records: a key
// found in it replays with no request at all (after the payload check). It
// holds at most MaxEntries records, each for at most TTL and never past the
// record's own retention, and drops the least recently used first. Safe for
// concurrent use; share one per process (a Lambda execution environment):
// each Wrap finds only the records it put, so Wraps on different stores (or
// prefixes) never answer for each other's keys.
//
// A cached replay is only as fresh as the cache: a key whose record was
// deleted from the table by hand still replays here until TTL.
type Cache struct {
	mu         sync.Mutex
	maxEntries int
	ttl        time.Duration
	order      *list.List // front: most recently used
	entries    map[string]*list.Element
}

type cached struct {
	key, fingerprint string
	response         []byte
	until            time.Time
	expiresAt        time.Time // the record's retention
}

// NewCache returns a cache of at most maxEntries records kept for ttl.
func NewCache(maxEntries int, ttl time.Duration) *Cache {
	return &Cache{maxEntries: max(maxEntries, 1), ttl: ttl, order: list.New(), entries: map[string]*list.Element{}}
}

// Len is the number of records held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

func (c *Cache) get(key string, now time.Time) (cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return cached{}, false
	}
	v := e.Value.(cached)
	if !now.Before(v.until) {
		c.order.Remove(e)
		delete(c.entries, key)
		return cached{}, false
	}
	c.order.MoveToFront(e)
	return v, true
}

func (c *Cache) put(key, fingerprint string, response []byte, now, recordExpires time.Time) {
	until := now.Add(c.ttl)
	if !recordExpires.IsZero() && recordExpires.Before(until) {
		until = recordExpires
	}
	if !now.Before(until) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := cached{key: key, fingerprint: fingerprint, response: response, until: until, expiresAt: recordExpires}
	if e, ok := c.entries[key]; ok {
		e.Value = v
		c.order.MoveToFront(e)
		return
	}
	c.entries[key] = c.order.PushFront(v)
	for c.order.Len() > c.maxEntries {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.entries, last.Value.(cached).key)
	}
}
