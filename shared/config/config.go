// Package config reads ExactOnce's settings from the environment; it builds
// nothing (shared/app wires what they describe, shared/awsconfig the SDK).
package config

import (
	"fmt"
	"strconv"
	"time"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/shared/secretkeys"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/tenant"
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
	// app.LoadTenants), TenantsSHA256 the digest it must have.
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
