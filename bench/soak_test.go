package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
)

// soakDuration is how long TestSoak drives traffic: EXACTONCE_SOAK (a Go
// duration), else d.
func soakDuration(t *testing.T, d time.Duration) time.Duration {
	if v := os.Getenv("EXACTONCE_SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// soakRate is the requests per second TestSoak's clients send in all:
// EXACTONCE_SOAK_RATE, else 100 (0: as fast as they can). A steady rate
// holds the server for the whole soak as a busy service is held, the same
// on any machine, and leaves the cores to make test's other lanes: sent as
// fast as they could, its 16 clients took about 100 CPU-seconds of the run
// (about 400 requests/s alone here).
func soakRate(t *testing.T) int {
	v := os.Getenv("EXACTONCE_SOAK_RATE")
	if v == "" {
		return 100
	}
	r, err := strconv.Atoi(v)
	if err != nil || r < 0 {
		t.Fatalf("EXACTONCE_SOAK_RATE=%q", v)
	}
	return r
}

// TestSoak runs the real local server binary (events and sweeper on) under
// mixed traffic from 16 clients at a steady rate (soakRate) for a bounded
// time: every answer must be a designed outcome (no 5xx, no transport
// error), and the server's resident memory at the end must stay near what
// it was once warm.
func TestSoak(t *testing.T) {
	t.Parallel() // with the bench's other correctness tests
	bin := filepath.Join(t.TempDir(), "local")
	if out, err := exec.Command("go", "build", "-o", bin, "../local").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "EXACTONCE_ADDR="+addr, "EXACTONCE_DYNAMODB_ENDPOINT="+testkit.OwnDynamoDB(t),
		"EXACTONCE_SECRET=soak-secret-0123456789abcdefghijklmnop", "EXACTONCE_SWEEP_INTERVAL=1s",
		"GOGC=100") // its memory as it runs in Lambda: with Go's default collector, not make test's
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := "http://" + addr
	for deadline := time.Now().Add(testkit.Patience); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(base + "/openapi.yaml"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the local server did not start")
		}
	}

	// An answer that never comes is a failure; a slow one on a loaded
	// machine is not (a 10 s limit failed 30 calls at load 30: 5 requests/s).
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: testkit.Patience}
	var requests, bad atomic.Int64
	var mu sync.Mutex
	statuses := map[string]int{}
	rate := soakRate(t)
	pace := func() {} // waits for the next request's turn
	if rate > 0 {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		pace = func() { <-tick.C }
	}
	send := func(method, path, body string, want ...int) string {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		pace()
		resp, err := hc.Do(req)
		requests.Add(1)
		if err != nil {
			bad.Add(1)
			t.Errorf("%s %s: %v", method, path, err)
			return ""
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		statuses[strconv.Itoa(resp.StatusCode)]++
		mu.Unlock()
		for _, w := range want {
			if resp.StatusCode == w {
				return string(b)
			}
		}
		bad.Add(1)
		t.Errorf("%s %s → %d %s, want %v", method, path, resp.StatusCode, b, want)
		return string(b)
	}

	rss := func() int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb
			}
		}
		return 0
	}

	total := soakDuration(t, time.Duration(testkit.Scale(60))*time.Second)
	warmAt := total / 6
	ctx, cancel := context.WithTimeout(context.Background(), total)
	defer cancel()
	var warm atomic.Int64
	go func() {
		select {
		case <-time.After(warmAt):
			warm.Store(rss())
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("soak-%d-%d", w, i)
				switch i % 4 {
				case 0: // plain: create, read, consume twice
					send("POST", "/actions", `{"actionId":"`+id+`","userId":"u","metadata":{"w":"`+strconv.Itoa(w)+`"}}`, 201)
					send("GET", "/actions/"+id, "", 200)
					send("POST", "/actions/"+id+"/consume", `{"reason":"soak"}`, 200)
					send("POST", "/actions/"+id+"/consume", "", 409)
				case 1: // PIN and payload: wrong PIN, right PIN with a key, its replay
					send("POST", "/actions", `{"actionId":"`+id+`","userId":"u","pin":"2468","payload":{"n":`+strconv.Itoa(i)+`}}`, 201)
					send("POST", "/actions/"+id+"/consume", `{"pin":"0000"}`, 403)
					req, _ := http.NewRequest("POST", base+"/actions/"+id+"/consume", strings.NewReader(`{"pin":"2468"}`))
					req.Header.Set("Idempotency-Key", id)
					for range 2 {
						r2 := req.Clone(context.Background())
						r2.Body = io.NopCloser(strings.NewReader(`{"pin":"2468"}`))
						pace()
						resp, err := hc.Do(r2)
						requests.Add(1)
						if err != nil || resp.StatusCode != 200 {
							bad.Add(1)
							t.Errorf("keyed consume: %v %v", err, resp)
						}
						if resp != nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					}
				case 2: // cancel, then consume is 410; short-lived ones the sweeper expires
					send("POST", "/actions", `{"actionId":"`+id+`","userId":"u"}`, 201)
					send("POST", "/actions/"+id+"/cancel", `{"reason":"soak"}`, 200)
					send("POST", "/actions/"+id+"/consume", "", 410)
					send("POST", "/actions", `{"actionId":"`+id+`-x","userId":"u","expiresAt":"`+time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)+`"}`, 201)
					send("GET", "/actions/missing-"+id, "", 404)
				case 3: // an idempotency key's life
					body := send("POST", "/keys/"+id+"/claim", `{"fingerprint":"f","leaseSeconds":30}`, 201)
					send("POST", "/keys/"+id+"/claim", `{"fingerprint":"f"}`, 409)
					token := between(body, `"token":"`, `"`)
					send("POST", "/keys/"+id+"/complete", `{"token":"`+token+`","response":{"ok":true}}`, 200)
					send("POST", "/keys/"+id+"/claim", `{"fingerprint":"f"}`, 200)
					send("POST", "/actions", `{"userId":"u","colour":"red"}`, 400)
				}
			}
		})
	}
	wg.Wait()
	end := rss()
	t.Logf("soak %v, 16 clients at %d requests/s (0: unpaced): %d requests (%.0f/s), statuses %v; server RSS %d KiB once warm (at %v), %d KiB at the end",
		total, rate, requests.Load(), float64(requests.Load())/total.Seconds(), statuses, warm.Load(), warmAt, end)
	if bad.Load() > 0 {
		t.Fatalf("%d answers outside the designed outcomes", bad.Load())
	}
	if w := warm.Load(); w == 0 || end > 2*w {
		t.Fatalf("server memory grew from %d KiB to %d KiB", w, end)
	}
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, to)
	return v
}
