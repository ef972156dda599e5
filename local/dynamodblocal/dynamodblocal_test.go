package dynamodblocal

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestStartKnowsItsOwnServer: a port picked free can be taken by another
// server before java binds it (java then exits: 'Failed to bind'). Start must
// not take that server for DynamoDB Local because it accepts connections:
// on a port another HTTP server holds, it fails, and with no port given it
// picks another (tested by every test binary: testkit.Main). A ShortLived
// instance's JVM runs with C1 alone, and answers as DynamoDB.
func TestStartKnowsItsOwnServer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs DynamoDB Local (Java)")
	}
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	in, err := Start(context.Background(), Options{Port: other.Listener.Addr().(*net.TCPAddr).Port})
	if err == nil {
		in.Stop()
		t.Fatalf("Start answered with %s, which another server holds", in.Endpoint)
	}
	t.Logf("Start on a taken port: %v", err)
	in, err = Start(context.Background(), Options{ShortLived: true})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	if ok, err := isDynamoDB(in.Endpoint); !ok || err != nil {
		t.Fatalf("%s: DynamoDB %v, %v", in.Endpoint, ok, err)
	}
	if runtime.GOOS == "linux" {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", in.cmd.Process.Pid))
		if err != nil || !slices.Contains(strings.Split(string(cmdline), "\x00"), shortLivedJIT) {
			t.Fatalf("a ShortLived instance's java runs as %q (%v), without %s", cmdline, err, shortLivedJIT)
		}
	}
}
