package dynamodblocal

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/exactonce/exactonce/local/eventbus"
)

// TestStartKnowsItsOwnServer: a port picked free can be taken by another
// server before java binds it (java then exits: 'Failed to bind'). Start must
// not take that server for DynamoDB Local because it accepts connections, or
// answers with an AWS-shaped error (the local event bus, started on free
// ports by the same test binaries):
// on a port another HTTP server holds, it fails, and with no port given it
// picks another (tested by every test binary: testkit.Main). An instance
// started with the zero Options runs its JVM with C1 alone and the serial
// collector, and answers as DynamoDB.
func TestStartKnowsItsOwnServer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs DynamoDB Local (Java)")
	}
	bus, err := eventbus.New(io.Discard) // answers ListTables with an error of AWS's shape
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	for _, other := range []string{notFound.URL, bus.URL} {
		port, _ := strconv.Atoi(other[strings.LastIndex(other, ":")+1:])
		in, err := Start(context.Background(), Options{Port: port})
		if err == nil {
			in.Stop()
			t.Fatalf("Start answered with %s, which another server holds", in.Endpoint)
		}
		t.Logf("Start on a taken port: %v", err)
	}
	in, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	if ok, err := isDynamoDB(in.Endpoint); !ok || err != nil {
		t.Fatalf("%s: DynamoDB %v, %v", in.Endpoint, ok, err)
	}
	if runtime.GOOS == "linux" {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", in.cmd.Process.Pid))
		args := strings.Split(string(cmdline), "\x00")
		if err != nil || !slices.Contains(args, quickJIT) || !slices.Contains(args, serialGC) {
			t.Fatalf("an instance's java runs as %q (%v), without %s or %s", cmdline, err, quickJIT, serialGC)
		}
	}
}
