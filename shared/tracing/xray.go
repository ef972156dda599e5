//go:build xray

package tracing

import (
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-xray-sdk-go/instrumentation/awsv2"
	"github.com/aws/aws-xray-sdk-go/xray"
	"github.com/aws/aws-xray-sdk-go/xraylog"
)

// Enabled reports whether this build records X-Ray subsegments.
const Enabled = true

func init() {
	// The SDK logs at info level to stdout by default, which would mix its
	// lines into the function's JSON request log; keep only its warnings.
	xray.SetLogger(xraylog.NewDefaultLogger(os.Stderr, xraylog.LogLevelWarn))
}

// Instrument makes every client built from cfg record a subsegment per call
// (service, operation, region, request id, retries, errors) under the
// function's segment, which Lambda active tracing creates; the subsegments
// go to the X-Ray daemon Lambda runs (AWS_XRAY_DAEMON_ADDRESS) over UDP.
func Instrument(cfg *aws.Config) { awsv2.AWSV2Instrumentor(&cfg.APIOptions) }
