// Command local runs ExactOnce on this machine with nothing from AWS:
// DynamoDB Local (started and stopped with it), the table, and the Lambda
// handlers behind an API Gateway-style HTTP server.
//
//	go run ./local            # or: make run
//
// Environment: EXACTONCE_ADDR (default 127.0.0.1:8080), EXACTONCE_DATA_DIR
// (keep data in this folder; default in memory), EXACTONCE_SECRET (default: a
// development secret), EXACTONCE_DYNAMODB_ENDPOINT (use a running DynamoDB
// instead of starting one), EXACTONCE_SWEEP_INTERVAL (how often due actions
// are marked expired; default 2s), EXACTONCE_TENANTS (the tenant map),
// EXACTONCE_PRINT_METRICS=1 (also print the EMF metric lines the Lambdas
// print; their totals are always at GET /_local/metrics).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/exactonce/exactonce/local/dynamodblocal"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/app"
	"github.com/exactonce/exactonce/shared/secretkeys"
	"github.com/exactonce/exactonce/shared/tenant"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "exactonce-local:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := app.Logger()

	addr := envOr("EXACTONCE_ADDR", "127.0.0.1:8080")
	dataDir := os.Getenv("EXACTONCE_DATA_DIR")
	endpoint := os.Getenv("EXACTONCE_DYNAMODB_ENDPOINT")
	if endpoint == "" {
		ddb, err := dynamodblocal.Start(ctx, dynamodblocal.Options{DataDir: dataDir})
		if err != nil {
			return err
		}
		defer ddb.Stop()
		endpoint = ddb.Endpoint
	}
	secret, secretNote, err := localSecret(dataDir)
	if err != nil {
		return err
	}
	sweepEvery, err := time.ParseDuration(envOr("EXACTONCE_SWEEP_INTERVAL", "2s"))
	if err != nil || sweepEvery <= 0 {
		return fmt.Errorf("EXACTONCE_SWEEP_INTERVAL must be a positive Go duration such as 2s")
	}
	tenants, err := tenant.Parse(os.Getenv("EXACTONCE_TENANTS"))
	if err != nil {
		return fmt.Errorf("EXACTONCE_TENANTS: %w", err)
	}
	// One line per request: the EMF lines (300–500 characters each, one per
	// request, stream batch and sweep) only when asked for.
	var metricsOut io.Writer // none
	if os.Getenv("EXACTONCE_PRINT_METRICS") == "1" {
		metricsOut = os.Stdout
	}
	srv, err := server.New(ctx, server.Options{DynamoDBEndpoint: endpoint, Secret: secret, Log: log, Events: true, SweepEvery: sweepEvery,
		Tenants: os.Getenv("EXACTONCE_TENANTS"), MetricsOut: metricsOut})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String()
	storage := "in memory"
	if dataDir != "" {
		storage = "in " + dataDir
	}
	fmt.Printf("ExactOnce local: %s (DynamoDB Local at %s, data %s)\n", url, endpoint, storage)
	fmt.Printf("  %s\n", secretNote)
	fmt.Printf("  events: %s/_local/events (local EventBridge); expiry sweep every %s\n", url, sweepEvery)
	fmt.Print(banner(url, tenants))

	hs := &http.Server{Handler: srv.Handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// banner is what the local server says about tenants and a first request
// that works in its mode.
func banner(url string, tenants *tenant.Map) string {
	try := "  try: curl -s -X POST " + url + "/actions -H 'Content-Type: application/json' -d '{\"userId\":\"u1\"}'"
	if tenants == nil {
		return try + "\n"
	}
	b := "  tenants ON: " + strings.Join(tenants.Names(), ", ") + "; each request's caller is its X-Exactonce-Caller header" +
		" (a caller in no tenant gets 403 forbidden)\n"
	if t, caller, ok := exampleCaller(tenants); ok {
		return b + try + " -H 'X-Exactonce-Caller: " + caller + "'   # tenant " + t + "\n"
	}
	return b + "  try: curl -s -X POST " + url + "/actions -H 'X-Exactonce-Caller: <a principal ARN your map places>' -d '{\"userId\":\"u1\"}'\n"
}

// localSecret returns EXACTONCE_SECRET, or a development secret: kept in the
// data folder when there is one (so stored payloads still open after a
// restart), else made up for this run. Either way it says so loudly.
func localSecret(dataDir string) (secret, note string, err error) {
	if s := os.Getenv("EXACTONCE_SECRET"); s != "" {
		return s, "server secret: from EXACTONCE_SECRET", nil
	}
	const warn = "WARNING: using a DEVELOPMENT server secret"
	if dataDir == "" {
		return secretkeys.NewDevelopmentSecret(), warn + " made for this run (never use this outside your machine)", nil
	}
	path := filepath.Join(dataDir, "dev-secret")
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), warn + " from " + path, nil
	}
	s := secretkeys.NewDevelopmentSecret()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return "", "", err
	}
	return s, warn + " saved to " + path, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
