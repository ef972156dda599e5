// Package eventbus is a local stand-in for EventBridge's PutEvents API: the
// publisher's real SDK client points at it. It prints each event as one JSON
// line, keeps the last 1000, and serves them at GET /_local/events.
package eventbus

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Keep is how many events the bus remembers.
const Keep = 1000

// Event is one accepted event, as /_local/events shows it.
type Event struct {
	ID         string          `json:"id"`
	Bus        string          `json:"eventBusName"`
	Source     string          `json:"source"`
	DetailType string          `json:"detailType"`
	Detail     json.RawMessage `json:"detail"`
	Time       string          `json:"time"`
}

// Bus is the fake. The zero value is not usable; call New.
type Bus struct {
	mu     sync.Mutex
	events []Event
	out    io.Writer
	srv    *http.Server
	subs   []func(Event)
	// URL is the endpoint to give the SDK client.
	URL string
}

// New starts the fake on a free loopback port; each event is printed to out.
func New(out io.Writer) (*Bus, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Bus{out: out, URL: "http://" + ln.Addr().String()}
	b.srv = &http.Server{Handler: http.HandlerFunc(b.putEvents), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

// Close stops the fake.
func (b *Bus) Close() error { return b.srv.Close() }

// putEvents implements the PutEvents action of the AWS JSON 1.1 protocol.
func (b *Bus) putEvents(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	if r.Header.Get("X-Amz-Target") != "AWSEvents.PutEvents" {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"__type":"UnknownOperationException","message":"the local bus only implements PutEvents"}`)
		return
	}
	var in struct {
		Entries []struct {
			Source, DetailType, Detail, EventBusName string
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"__type":"ValidationException","message":"bad request"}`)
		return
	}
	type result struct {
		EventId   string `json:",omitempty"`
		ErrorCode string `json:",omitempty"`
	}
	out := struct {
		FailedEntryCount int
		Entries          []result
	}{}
	var accepted []Event
	b.mu.Lock()
	for _, e := range in.Entries {
		if !json.Valid([]byte(e.Detail)) || e.Source == "" || e.DetailType == "" {
			out.FailedEntryCount++
			out.Entries = append(out.Entries, result{ErrorCode: "MalformedDetail"})
			continue
		}
		ev := Event{ID: newID(), Bus: e.EventBusName, Source: e.Source, DetailType: e.DetailType,
			Detail: json.RawMessage(e.Detail), Time: time.Now().UTC().Format(time.RFC3339Nano)}
		b.events = append(b.events, ev)
		if len(b.events) > Keep {
			b.events = b.events[len(b.events)-Keep:]
		}
		if line, err := json.Marshal(struct {
			Msg string `json:"msg"`
			Event
		}{"event", ev}); err == nil {
			_, _ = b.out.Write(append(line, '\n'))
		}
		out.Entries = append(out.Entries, result{EventId: ev.ID})
		accepted = append(accepted, ev)
	}
	subs := b.subs
	b.mu.Unlock()
	for _, ev := range accepted {
		for _, f := range subs {
			f(ev)
		}
	}
	_ = json.NewEncoder(w).Encode(out)
}

// Subscribe calls f with each event accepted from now on, in order, before
// PutEvents answers (the end-to-end suite routes them to rules' targets).
func (b *Bus) Subscribe(f func(Event)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs = append(b.subs, f)
}

// Events returns the remembered events, oldest first.
func (b *Bus) Events() []Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Event(nil), b.events...)
}

// Handler serves GET /_local/events: a JSON array, newest last.
func (b *Bus) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		evs := b.Events()
		if evs == nil {
			evs = []Event{}
		}
		_ = json.NewEncoder(w).Encode(evs)
	})
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
