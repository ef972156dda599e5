package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/secretkeys"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/tenant"
)

// Store returns the action store c describes, on db.
func Store(c config.Config, db *dynamodb.Client) *store.Store {
	return store.New(db, c.Table, store.Options{Retention: c.Retention, ExpiryShards: c.ExpiryShards, KeyRetention: c.KeyRetention})
}

// LoadTenants reads the tenant map from c.TenantsParameter (when set) into
// c.Tenants, checking it is the map the function was deployed with (a
// function started while a deploy changes the map fails its init instead of
// placing callers by another map). Bound ctx (config.InitFetchTimeout).
func LoadTenants(ctx context.Context, c *config.Config, awsCfg aws.Config) error {
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
// (config.InitFetchTimeout) passed first, it says so plainly.
func InitError(what string, ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("config: %s: no answer within %s (the service is slow or unreachable); this cold start fails and the next one tries again", what, config.InitFetchTimeout)
	}
	return fmt.Errorf("config: %s: %w", what, err)
}

// SecretSource reads the server secret: from Secrets Manager when a secret
// ARN is set (at cold start, then when the keys are refreshed or meet an
// unknown key id: see secretkeys.Provider), else the plain secret.
func SecretSource(c config.Config, awsCfg aws.Config) (secretkeys.Source, error) {
	if c.SecretARN == "" && c.Secret == "" {
		return nil, fmt.Errorf("config: set %s or %s", config.EnvSecretARN, config.EnvSecret)
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
