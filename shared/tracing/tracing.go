//go:build !xray

// Package tracing records an AWS X-Ray subsegment for every AWS SDK call
// (DynamoDB, Secrets Manager, EventBridge) when a function is built with the
// "xray" build tag, which the CDK app adds with exactonce:tracing=true.
//
// Without the tag (the default) this file is compiled instead and does
// nothing: the X-Ray SDK brings its own copy of the v1 AWS SDK, gRPC and
// fasthttp, which doubles a function's binary (10.5 MB → 22.4 MB), so
// functions that are not traced do not carry it.
package tracing

import "github.com/aws/aws-sdk-go-v2/aws"

// Enabled reports whether this build records X-Ray subsegments.
const Enabled = false

// Instrument makes every client built from cfg trace its calls; a no-op in
// builds without the xray tag.
func Instrument(cfg *aws.Config) {}
