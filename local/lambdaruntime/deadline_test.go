package lambdaruntime_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/exactonce/exactonce/local/lambdaruntime"
)

// deadlineHelper, set in the environment, makes this test binary a
// bootstrap that answers one invocation with the Lambda-Runtime-Deadline-Ms
// it was given (deadlineBootstrap, from TestMain).
const deadlineHelper = "LAMBDARUNTIME_TEST_DEADLINE_BOOTSTRAP"

func deadlineBootstrap() {
	api := "http://" + os.Getenv("AWS_LAMBDA_RUNTIME_API") + "/2018-06-01/runtime/invocation/"
	resp, err := http.Get(api + "next")
	if err != nil {
		os.Exit(1)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	id, deadline := resp.Header.Get("Lambda-Runtime-Aws-Request-Id"), resp.Header.Get("Lambda-Runtime-Deadline-Ms")
	resp, err = http.Post(api+id+"/response", "text/plain", bytes.NewBufferString(deadline))
	if err != nil {
		os.Exit(1)
	}
	_ = resp.Body.Close()
	time.Sleep(time.Minute) // stopped by Close
}

// TestDeadlineHasTheGrace: a function given Grace (an emulator's slower
// run: qemu-user runs the arm64 functions several times slower, and on a
// busy machine slower still) is told a deadline as far as the time it is
// given. Told its bare timeout, its SDK calls were cancelled at that
// deadline and it answered 503 while the invocation still had time: make
// e2e's first create of a stack once took 11 s on a busy machine and
// answered "the action store is unavailable".
func TestDeadlineHasTheGrace(t *testing.T) {
	f, err := lambdaruntime.StartConfig(os.Args[0], lambdaruntime.Config{Timeout: time.Second, Grace: 3}, deadlineHelper+"=1")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := f.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	r, err := f.Invoke(ctx, []byte(`{}`), "")
	answered := time.Now()
	if err != nil || r.Error {
		t.Fatalf("invoke: %v %s", err, r.Body)
	}
	ms, err := strconv.ParseInt(string(r.Body), 10, 64)
	if err != nil {
		t.Fatalf("the bootstrap answered %q", r.Body)
	}
	// Told between sent and answered: 3 s after a time in between.
	deadline := time.UnixMilli(ms)
	if deadline.Before(sent.Add(3*time.Second-time.Millisecond)) || deadline.After(answered.Add(3*time.Second)) {
		t.Fatalf("a 1 s function with Grace 3 was told a deadline %s after the invocation was sent, want 3 s", deadline.Sub(sent))
	}
}
