// Package awsconfig builds the AWS SDK configuration every ExactOnce
// component uses: in AWS (Load: the default chain, the retryer, X-Ray) and
// against a local endpoint (Local: DynamoDB Local, the fake AWS APIs).
package awsconfig

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	sdkconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/smithy-go"

	"github.com/exactonce/exactonce/shared/tracing"
)

// HTTPClient is the SDK's buildable HTTP client with enough idle connections
// per host for concurrent requests (the default of 2 reconnects under load).
func HTTPClient() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConnsPerHost = 128
	})
}

// ReplicatedWriteConflict is the error code DynamoDB answers, on a
// multi-Region strongly consistent (MRSC) table, to a write on an item that a
// request in another Region is modifying at that moment. The write was not
// applied, so it is safe to retry (the SDK models mark it retry-safe), but
// the Go SDK's standard retryer does not retry it by itself.
const ReplicatedWriteConflict = "ReplicatedWriteConflictException"

// Retryer is every ExactOnce SDK client's retryer: the SDK's standard one
// (capped exponential backoff with jitter, 3 attempts, a retry quota), which
// also retries ReplicatedWriteConflict, and does so without charging the
// quota (conflictsFree). A new one per call, as aws.Config.Retryer wants
// (each client its own quota).
func Retryer() aws.Retryer {
	return conflictsFree{retry.AddWithErrorCodes(retry.NewStandard(), ReplicatedWriteConflict).(aws.RetryerV2)}
}

// conflictsFree retries a write conflict with another Region without
// spending the retry quota, which a client keeps for its life (a Lambda
// container's): a storm of conflicts spent it, after which not even a
// single conflict was retried, each a 503 at once. A conflict is contention
// on one item, not a service in trouble; the quota still sheds the retries
// of throttles and faults, and every call keeps its 3 attempts at most.
type conflictsFree struct{ aws.RetryerV2 }

func (r conflictsFree) GetRetryToken(ctx context.Context, opErr error) (func(error) error, error) {
	var e smithy.APIError
	if errors.As(opErr, &e) && e.ErrorCode() == ReplicatedWriteConflict {
		return func(error) error { return nil }, nil
	}
	return r.RetryerV2.GetRetryToken(ctx, opErr)
}

// Load loads the default SDK configuration (Lambda's role credentials and
// region), traced with X-Ray in builds with the xray tag, with Retryer.
// AWS_ENDPOINT_URL_<SERVICE> variables point a service elsewhere.
func Load(ctx context.Context) (aws.Config, error) {
	cfg, err := sdkconfig.LoadDefaultConfig(ctx, sdkconfig.WithHTTPClient(HTTPClient()), sdkconfig.WithRetryer(Retryer))
	if err != nil {
		return cfg, err
	}
	tracing.Instrument(&cfg)
	return cfg, nil
}

// Local is an SDK configuration for a local endpoint (DynamoDB Local, a fake
// AWS API): static dummy credentials, a fixed region, the given endpoint,
// Retryer, and HTTPClient sending again what DynamoDB Local refused for a
// lock wait (lockWaits).
func Local(endpoint string) aws.Config {
	return aws.Config{
		Region:       "us-east-1",
		Retryer:      Retryer,
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   lockWaits{HTTPClient().WithTimeout(LocalAttemptTimeout)},
	}
}

// lockWaits sends a request again, up to 20 times with a short growing
// pause, while DynamoDB Local answers it 500 because it waited too long for
// its lock. DynamoDB Local runs one writer at a time, and on a loaded
// machine a writer can wait out its limit: the request was not applied, and
// "will succeed in actual DynamoDB API", so an emulator's wait is not spent
// from the SDK's 3 attempts and retry quota, which stay for real faults.
type lockWaits struct{ next aws.HTTPClient }

func (c lockWaits) Do(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	for attempt := 1; ; attempt++ {
		req := r.Clone(r.Context())
		if body != nil {
			req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		resp, err := c.next.Do(req)
		if err != nil || resp.StatusCode != http.StatusInternalServerError || attempt == 20 {
			return resp, err
		}
		answer, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(answer))
		if err != nil || !bytes.Contains(answer, []byte("waiting for a lock")) {
			return resp, err
		}
		select {
		case <-r.Context().Done(): // the caller gave up: the refusal is its answer
			return resp, nil
		case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
		}
	}
}

// LocalAttemptTimeout bounds one request to a local endpoint. DynamoDB Local
// on a loaded machine has been seen to leave concurrent requests unanswered
// for minutes; an attempt given up is retried by the SDK like a lost answer
// (every write of the store is conditional, so a retry never acts twice).
const LocalAttemptTimeout = time.Minute
