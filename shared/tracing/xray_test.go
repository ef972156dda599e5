//go:build xray

package tracing_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-xray-sdk-go/xray"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/shared/app"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// The trace header Lambda puts in the handler's context under active tracing.
const (
	traceRoot   = "1-5759e988-bd862e3fe1be46a994272793"
	traceParent = "53995c3f42cd8ad8"
)

// segment is the part of an X-Ray segment document the test checks.
type segment struct {
	Name     string `json:"name"`
	TraceID  string `json:"trace_id"`
	ParentID string `json:"parent_id"`
	Type     string `json:"type"`
	AWS      struct {
		Operation string `json:"operation"`
		TableName string `json:"table_name"`
	} `json:"aws"`
}

// TestDynamoDBCallsBecomeSubsegments runs a handler built exactly as a
// Lambda's main builds it, under a Lambda trace header, with the X-Ray SDK
// sending to a local fake daemon (a UDP socket), and checks what arrives.
func TestDynamoDBCallsBecomeSubsegments(t *testing.T) {
	daemon, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer daemon.Close()
	if err := xray.Configure(xray.Config{DaemonAddr: daemon.LocalAddr().String()}); err != nil {
		t.Fatal(err)
	}

	vars, err := testkit.LambdaEnv(t, "tracing")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	api, err := app.FromEnv(context.Background(), app.Needs{Keys: true})
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.WithValue(context.Background(), xray.LambdaTraceHeaderKey,
		"Root="+traceRoot+";Parent="+traceParent+";Sampled=1")
	const pin, payload = "4821", "payload-secret-7f3a"
	res, err := api.Create(ctx, events.APIGatewayV2HTTPRequest{
		Body: `{"actionId":"traced-1","userId":"u-1","pin":"` + pin + `","payload":"` + payload + `"}`,
	})
	if err != nil || res.StatusCode != 201 {
		t.Fatalf("create: %d %v %s", res.StatusCode, err, res.Body)
	}

	_ = daemon.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64<<10)
	for {
		n, _, err := daemon.ReadFrom(buf)
		if err != nil {
			t.Fatalf("no DynamoDB subsegment reached the daemon: %v", err)
		}
		pkt := string(buf[:n])
		for _, secret := range []string{pin, payload} {
			if strings.Contains(pkt, secret) {
				t.Fatalf("trace data contains a secret %q: %s", secret, pkt)
			}
		}
		// A daemon packet is a JSON header line, then the segment document.
		head, doc, ok := strings.Cut(pkt, "\n")
		if !ok || !strings.Contains(head, `"format"`) {
			t.Fatalf("not an X-Ray daemon packet: %q", pkt)
		}
		var s segment
		if err := json.Unmarshal([]byte(doc), &s); err != nil {
			t.Fatalf("segment document: %v: %s", err, doc)
		}
		if s.Name != "DynamoDB" {
			continue
		}
		if s.AWS.Operation != "UpdateItem" || s.TraceID != traceRoot || s.ParentID != traceParent || s.Type != "subsegment" {
			t.Fatalf("subsegment = %+v, want UpdateItem under trace %s parent %s", s, traceRoot, traceParent)
		}
		return
	}
}
