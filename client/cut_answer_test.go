package client_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/exactonce/exactonce/client"
)

// cutAnswerAPI is a consume route behind a connection that drops: the
// first request consumes the action, and its 200 (with the payload) is cut
// half way by the connection closing, framed as frame says; a re-send with
// that Idempotency-Key and body replays the 200 whole (Idempotent-Replayed),
// and any other request is 409 already_used, as the service answers. It
// records each request's key and body.
type cutAnswerAPI struct {
	ln    net.Listener
	frame string // "content-length", "chunked" or "close-delimited"
	mu    sync.Mutex
	key   string // the key of the consume that won
	body  string
	seen  []string // "key body" of each request
}

const consumed = `{"actionId":"link-9","userId":"u-2","state":"consumed","consumedAt":"2026-01-01T00:00:00.000Z","pinProtected":true,"payload":{"session":"s-123"}}` + "\n"

func newCutAnswerAPI(t *testing.T, frame string) *cutAnswerAPI {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &cutAnswerAPI{ln: ln, frame: frame}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go a.serve(conn)
		}
	}()
	return a
}

func (a *cutAnswerAPI) serve(conn net.Conn) {
	defer conn.Close()
	req, err := http.ReadRequest(bufio.NewReader(conn))
	if err != nil {
		return
	}
	b, _ := io.ReadAll(req.Body)
	key := req.Header.Get("Idempotency-Key")
	a.mu.Lock()
	a.seen = append(a.seen, key+" "+string(b))
	first := a.key == ""
	if first {
		a.key, a.body = key, string(b)
	}
	replay := !first && key != "" && key == a.key && string(b) == a.body
	a.mu.Unlock()
	switch {
	case first: // consumed; the answer is lost half way
		half := consumed[:len(consumed)/2]
		switch a.frame {
		case "content-length":
			fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(consumed), half)
		case "chunked":
			fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(half), half)
		case "close-delimited":
			fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n%s", half)
		}
	case replay:
		fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nIdempotent-Replayed: true\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(consumed), consumed)
	default:
		body := `{"error":"already_used","message":"already used","consumedAt":"2026-01-01T00:00:00.000Z","requestId":"r"}` + "\n"
		fmt.Fprintf(conn, "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	}
}

// TestCutShortAnswerIsRetriedUnderItsKey: a consume that the server applied
// but whose 200 the connection cut half way is an answer that never came,
// however the body was framed: the client re-sends the same logical call
// (same Idempotency-Key, same body) and returns the replayed 200 with its
// payload (Replayed set), never ErrAlreadyUsed or a decoding error (the
// payload is revealed only by the consume and its replay: a new call could
// never get it back). With a close-delimited body (no Content-Length, no
// chunks: an HTTP/1.0-style proxy) the cut is a clean end of the stream, so
// only the JSON shows it; before, that answer was "decoding a 200 answer:
// unexpected end of JSON input" after one request.
func TestCutShortAnswerIsRetriedUnderItsKey(t *testing.T) {
	for _, frame := range []string{"content-length", "chunked", "close-delimited"} {
		t.Run(frame, func(t *testing.T) {
			api := newCutAnswerAPI(t, frame)
			c := client.New("http://"+api.ln.Addr().String(), fastRetry())
			a, err := c.Consume(context.Background(), "link-9", client.ConsumeInput{PIN: "4821"})
			api.mu.Lock()
			seen := append([]string(nil), api.seen...)
			api.mu.Unlock()
			if err != nil || string(a.Payload) != `{"session":"s-123"}` || !a.Replayed {
				t.Fatalf("Consume = %+v, %v after %d requests; want the replayed 200 with its payload", a, err, len(seen))
			}
			if len(seen) != 2 || seen[0] != seen[1] {
				t.Errorf("requests %q, want 2 with one key and one body", seen)
			}
		})
	}
}
