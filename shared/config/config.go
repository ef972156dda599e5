// Package config reads ExactOnce's settings from the environment and builds
// the AWS SDK configuration and server keys they describe.
package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/shared/secretkeys"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/tenant"
	"github.com/exactonce/exactonce/shared/tracing"
)

// Environment variables.
const (
	EnvTable     = "TABLE_NAME"              // the actions table
	EnvRetention = "EXACTONCE_RETENTION"     // Go duration finished actions stay readable (default 720h)
	EnvSecretARN = "EXACTONCE_SECRET_ARN"    // Secrets Manager secret with the server secret
	EnvSecret    = "EXACTONCE_SECRET"        // the server secret itself (local use)
	EnvShards    = "EXACTONCE_EXPIRY_SHARDS" // partitions of the expiry index (default 16)
	EnvKeyRetain = "EXACTONCE_KEY_RETENTION" // Go duration an idempotency key is kept (default 24h)
	EnvTenants   = "EXACTONCE_TENANTS"       // JSON tenant map (tenant → principal patterns); unset: one default tenant
	EnvJWTClaim  = "EXACTONCE_TENANT_CLAIM"  // JWT claim matched against the tenant map (default sub)
	// The tenant map of a deployed stack lives in an SSM parameter, out of
	// the functions' environment (Lambda's 4 KB would hold ~35 tenants):
	// its name, and the SHA-256 of the map the function was deployed with.
	EnvTenantsParameter = "EXACTONCE_TENANTS_PARAMETER"
	EnvTenantsSHA256    = "EXACTONCE_TENANTS_SHA256"
)

// InitFetchTimeout bounds what a cold start reads from other services (the
// server secret, the tenant map) altogether, so a slow or unreachable
// service fails the init with a clear error inside Lambda's 10 s init limit
// instead of answering 500s.
const InitFetchTimeout = 8 * time.Second

// Store returns the action store these settings describe.
func (c Config) Store(db *dynamodb.Client) *store.Store {
	return store.New(db, c.Table, store.Options{Retention: c.Retention, ExpiryShards: c.ExpiryShards, KeyRetention: c.KeyRetention})
}

// Config is the service's settings.
type Config struct {
	Table     string
	Retention time.Duration
	SecretARN string
	Secret    string
	// ExpiryShards must be the same for every function on the table.
	ExpiryShards int
	// KeyRetention is how long an idempotency key of the /keys routes is
	// kept after its last transition (its response replayed).
	KeyRetention time.Duration
	// SecretSource, when set, is read instead of SecretARN/Secret (the local
	// server and tests, which rotate the secret under a running API).
	SecretSource secretkeys.Source
	// Tenants maps callers to tenants (nil: one default tenant); TenantClaim
	// is the JWT claim it matches.
	Tenants     *tenant.Map
	TenantClaim string
	// TenantsParameter is the SSM parameter holding the tenant map (read by
	// LoadTenants), TenantsSHA256 the digest it must have.
	TenantsParameter, TenantsSHA256 string
}

// Load reads the settings through getenv (os.Getenv in production).
func Load(getenv func(string) string) (Config, error) {
	c := Config{
		Table:            getenv(EnvTable),
		Retention:        store.DefaultRetention,
		KeyRetention:     idempotency.DefaultRetention,
		ExpiryShards:     store.DefaultExpiryShards,
		SecretARN:        getenv(EnvSecretARN),
		Secret:           getenv(EnvSecret),
		TenantClaim:      getenv(EnvJWTClaim),
		TenantsParameter: getenv(EnvTenantsParameter),
		TenantsSHA256:    getenv(EnvTenantsSHA256),
	}
	if c.TenantsParameter != "" && getenv(EnvTenants) != "" {
		return c, fmt.Errorf("config: set %s or %s, not both", EnvTenants, EnvTenantsParameter)
	}
	var err error
	if c.Tenants, err = tenant.Parse(getenv(EnvTenants)); err != nil {
		return c, fmt.Errorf("config: %s: %w", EnvTenants, err)
	}
	if c.Table == "" {
		return c, fmt.Errorf("config: %s is not set", EnvTable)
	}
	if v := getenv(EnvRetention); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("config: %s must be a positive Go duration such as 720h", EnvRetention)
		}
		c.Retention = d
	}
	if v := getenv(EnvKeyRetain); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("config: %s must be a positive Go duration such as 24h", EnvKeyRetain)
		}
		c.KeyRetention = d
	}
	if v := getenv(EnvShards); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return c, fmt.Errorf("config: %s must be a whole number from 1 to 1000", EnvShards)
		}
		c.ExpiryShards = n
	}
	return c, nil
}

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
// also retries ReplicatedWriteConflict. A new one per call, as
// aws.Config.Retryer wants (each client its own quota).
func Retryer() aws.Retryer {
	return retry.AddWithErrorCodes(retry.NewStandard(), ReplicatedWriteConflict)
}

// AWS loads the default SDK configuration (Lambda's role credentials and
// region), traced with X-Ray in builds with the xray tag, with Retryer.
// AWS_ENDPOINT_URL_<SERVICE> variables point a service elsewhere.
func AWS(ctx context.Context) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithHTTPClient(HTTPClient()), awsconfig.WithRetryer(Retryer))
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
		case <-r.Context().Done():
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

// LoadTenants reads the tenant map from c.TenantsParameter (when set) into
// c.Tenants, checking it is the map the function was deployed with (a
// function started while a deploy changes the map fails its init instead of
// placing callers by another map). Bound ctx (InitFetchTimeout).
func LoadTenants(ctx context.Context, c *Config, awsCfg aws.Config) error {
	if c.TenantsParameter == "" {
		return nil
	}
	out, err := ssm.NewFromConfig(awsCfg).GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(c.TenantsParameter)})
	if err != nil {
		return InitError("read the tenant map from parameter "+c.TenantsParameter, ctx, err)
	}
	v := aws.ToString(out.Parameter.Value)
	if sum := sha256.Sum256([]byte(v)); c.TenantsSHA256 != "" && hex.EncodeToString(sum[:]) != c.TenantsSHA256 {
		return fmt.Errorf("config: the tenant map in parameter %s (sha256 %x) is not the one this function was deployed with (%s): a deploy is changing it; the next cold start reads it again",
			c.TenantsParameter, sum[:6], c.TenantsSHA256[:min(12, len(c.TenantsSHA256))])
	}
	if c.Tenants, err = tenant.Parse(v); err != nil {
		return fmt.Errorf("config: the tenant map in parameter %s: %w", c.TenantsParameter, err)
	}
	return nil
}

// InitError is err from reading what during a cold start: when ctx's bound
// (InitFetchTimeout) passed first, it says so plainly.
func InitError(what string, ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("config: %s: no answer within %s (the service is slow or unreachable); this cold start fails and the next one tries again", what, InitFetchTimeout)
	}
	return fmt.Errorf("config: %s: %w", what, err)
}

// SecretSource reads the server secret: from Secrets Manager when a secret
// ARN is set (at cold start, then when the keys are refreshed or meet an
// unknown key id: see secretkeys.Provider), else the plain secret.
func SecretSource(c Config, awsCfg aws.Config) (secretkeys.Source, error) {
	if c.SecretARN == "" && c.Secret == "" {
		return nil, fmt.Errorf("config: set %s or %s", EnvSecretARN, EnvSecret)
	}
	if c.SecretARN == "" {
		return func(context.Context) (string, error) { return c.Secret, nil }, nil
	}
	sm := secretsmanager.NewFromConfig(awsCfg)
	return func(ctx context.Context) (string, error) {
		out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: &c.SecretARN})
		if err != nil {
			return "", fmt.Errorf("config: read secret %s: %w", c.SecretARN, err)
		}
		if out.SecretString == nil {
			return "", errors.New("config: the secret has no string value")
		}
		return *out.SecretString, nil
	}, nil
}
