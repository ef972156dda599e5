// Package app wires the action API from its configuration: the one place a
// Lambda's main and the local server share.
package app

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/httpapi"
	"github.com/exactonce/exactonce/shared/secretkeys"
	"github.com/exactonce/exactonce/shared/telemetry"
)

// Logger is the JSON logger every component writes its lines with.
func Logger() *slog.Logger { return slog.New(slog.NewJSONHandler(os.Stdout, nil)) }

// Needs says what a function uses beyond the table.
type Needs struct {
	// Keys: the server secret (PIN HMAC, payload sealing, key-derived ids,
	// keyed fingerprints, key digests and log hashes). Every route that
	// reads a body or a key needs it; GET /actions/{id} runs without it.
	Keys bool
}

// FromEnv builds the API the way a Lambda does at cold start: settings from
// the environment, SDK configuration from the default chain.
func FromEnv(ctx context.Context, needs Needs) (*httpapi.API, error) {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		return nil, err
	}
	awsCfg, err := awsconfig.Load(ctx)
	if err != nil {
		return nil, err
	}
	return build(ctx, cfg, awsCfg, Logger(), telemetry.New(os.Stdout), needs)
}

// New builds the API with every route's needs met, from explicit settings;
// metrics may be nil.
func New(ctx context.Context, cfg config.Config, awsCfg aws.Config, log *slog.Logger, metrics *telemetry.Metrics) (*httpapi.API, error) {
	return build(ctx, cfg, awsCfg, log, metrics, Needs{Keys: true})
}

func build(ctx context.Context, cfg config.Config, awsCfg aws.Config, log *slog.Logger, metrics *telemetry.Metrics, needs Needs) (*httpapi.API, error) {
	// What the cold start reads from other services, bounded altogether.
	initCtx, cancel := context.WithTimeout(ctx, config.InitFetchTimeout)
	defer cancel()
	if err := LoadTenants(initCtx, &cfg, awsCfg); err != nil {
		return nil, err
	}
	var keys *secretkeys.Provider
	if needs.Keys {
		src := cfg.SecretSource
		if src == nil {
			var err error
			if src, err = SecretSource(cfg, awsCfg); err != nil {
				return nil, err
			}
		}
		var err error
		if keys, err = secretkeys.NewProvider(initCtx, src); err != nil {
			return nil, InitError("read the server secret", initCtx, err)
		}
		keys.Refused = func(err error) {
			log.Error("server secret re-read failed; the keys in use are kept", "error", err.Error())
		}
	}
	db := dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, telemetry.MeterDynamoDB)
	})
	api := httpapi.New(Store(cfg, db), keys, log)
	api.Metrics = metrics
	api.Tenants, api.TenantClaim = cfg.Tenants, cfg.TenantClaim
	return api, nil
}
