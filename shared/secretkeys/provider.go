package secretkeys

import (
	"context"
	"sync"
	"time"
)

// Source reads the server secret's current value (Secrets Manager in AWS, a
// variable or file locally).
type Source func(context.Context) (string, error)

// Provider holds the Keys of a running function and keeps them current: it
// re-reads the secret when they are older than Refresh (so a warm function
// picks up a rotation within minutes) and, at most once per MinGap, when a
// request meets a key id they do not know (an item written by a function
// that was rotated first).
type Provider struct {
	source  Source
	Refresh time.Duration // default 5 minutes
	MinGap  time.Duration // default 1 second
	// ReadTimeout bounds a read made on a request's path (a refresh, or
	// learning a key id), default 2 seconds: a source that hangs costs the
	// request that long, then the keys it has serve it (or 503), well
	// within the function's timeout.
	ReadTimeout time.Duration
	Now         func() time.Time
	// Refused, when set, is told why a warm function's re-read failed
	// (the source's error, or a value ParseSecret refuses): it keeps the
	// keys it has, and says so nowhere else. The error holds no secret.
	Refused func(error)

	mu        sync.Mutex
	keys      *Keys
	triedAt   time.Time // the last read of the secret, failed or not
	learnedAt time.Time // the last read caused by an unknown key id
}

// NewProvider reads the secret once (a cold start fails loudly without it).
func NewProvider(ctx context.Context, src Source) (*Provider, error) {
	p := &Provider{source: src, Refresh: 5 * time.Minute, MinGap: time.Second, ReadTimeout: 2 * time.Second, Now: time.Now}
	if _, err := p.load(ctx, 0); err != nil {
		return nil, err
	}
	return p, nil
}

// StaticProvider serves fixed keys (tests, tools).
func StaticProvider(k *Keys) *Provider {
	return &Provider{keys: k, Refresh: 1<<63 - 1, MinGap: 1<<63 - 1, Now: time.Now, triedAt: time.Now()}
}

// Keys returns the current keys, re-reading the secret first when they are
// older than Refresh. A failed refresh keeps the keys it has.
func (p *Provider) Keys(ctx context.Context) *Keys {
	p.mu.Lock()
	stale := p.source != nil && p.Now().Sub(p.triedAt) >= p.Refresh
	k := p.keys
	p.mu.Unlock()
	if stale {
		if nk, err := p.load(ctx, p.ReadTimeout); err == nil {
			return nk
		}
	}
	return k
}

// Learn is called when a request met key id id: if the keys do not know it
// and the last read is older than MinGap, it re-reads the secret. It returns
// the keys to retry with and whether they know id.
func (p *Provider) Learn(ctx context.Context, id string) (*Keys, bool) {
	p.mu.Lock()
	k := p.keys
	due := p.source != nil && p.Now().Sub(p.learnedAt) >= p.MinGap
	if due && !k.Knows(id) {
		p.learnedAt = p.Now()
	}
	p.mu.Unlock()
	if k.Knows(id) {
		return k, true
	}
	if !due {
		return k, false
	}
	nk, err := p.load(ctx, p.ReadTimeout)
	if err != nil {
		return k, false
	}
	return nk, nk.Knows(id)
}

// load reads the secret, for at most timeout when it is not 0.
func (p *Provider) load(ctx context.Context, timeout time.Duration) (*Keys, error) {
	p.mu.Lock()
	p.triedAt = p.Now() // a failing source is not asked again before MinGap/Refresh
	warm := p.keys != nil
	p.mu.Unlock()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	s, err := p.source(ctx)
	var k *Keys
	if err == nil {
		k, err = ParseSecret(s)
	}
	if err != nil {
		if warm && p.Refused != nil {
			p.Refused(err)
		}
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = k
	return k, nil
}
