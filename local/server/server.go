// Package server assembles the local ExactOnce: the Lambda handlers behind
// the API Gateway adapter, on a DynamoDB-compatible endpoint. make run
// (the local command) and the integration tests (internal/testkit) use it;
// make e2e runs the functions' built assets instead (e2e/emulator).
package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/exactonce/exactonce/events"
	"github.com/exactonce/exactonce/local/eventbus"
	"github.com/exactonce/exactonce/local/streams"
	"github.com/exactonce/exactonce/shared/publish"
	"github.com/exactonce/exactonce/shared/republish"

	openapi "github.com/exactonce/exactonce/api"
	"github.com/exactonce/exactonce/local/gateway"
	"github.com/exactonce/exactonce/shared/app"
	"github.com/exactonce/exactonce/shared/awsconfig"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/httpapi"
	"github.com/exactonce/exactonce/shared/secretkeys"
	"github.com/exactonce/exactonce/shared/store"
	"github.com/exactonce/exactonce/shared/sweep"
	"github.com/exactonce/exactonce/shared/telemetry"
	"github.com/exactonce/exactonce/shared/tenant"
)

// DefaultTable is the local table's name.
const DefaultTable = "exactonce-actions"

// LocalBus is the local event bus's name.
const LocalBus = "exactonce-local"

// Options configure New.
type Options struct {
	DynamoDBEndpoint string // required: DynamoDB Local's URL
	Table            string // default DefaultTable
	Secret           string // the server secret (required unless SecretSource is set)
	// Tenants is the tenant map (JSON, as EXACTONCE_TENANTS); "" means one
	// default tenant. The caller of a request is its X-Exactonce-Caller header.
	Tenants string
	// SecretSource, when set, is read for the secret instead of Secret, at
	// start and whenever the API reloads it (rotation tests).
	SecretSource secretkeys.Source
	Retention    time.Duration // default store.DefaultRetention
	Log          *slog.Logger  // default app.Logger()
	// AWS, when set, is used instead of awsconfig.Local(DynamoDBEndpoint), e.g. to
	// put a counting or fault-injecting transport in the path.
	AWS *aws.Config
	// Events runs the stream publisher on the table's stream, publishing to a
	// local EventBridge (its events at GET /_local/events). Without it a
	// table the server creates has no stream (nothing would read it).
	Events bool
	// EventLog receives one JSON line per published event (default os.Stdout).
	EventLog io.Writer
	// EventBridgeVia, when set, maps the local bus's URL to the endpoint the
	// publisher calls, e.g. a fault-injecting proxy in front of it.
	EventBridgeVia func(busURL string) string
	// TuneEvents adjusts the stream publisher and reader before they start
	// (tests scale their retries and waits down).
	TuneEvents func(*publish.Publisher, *streams.Reader)
	// SweepEvery runs the expiry sweeper at this interval (0: not at all).
	SweepEvery time.Duration
	// ExpiryShards of the expiry index (default store.DefaultExpiryShards).
	ExpiryShards int
	// MetricsOut receives the EMF metric lines (nil: none are printed); their
	// totals are at GET /_local/metrics either way.
	MetricsOut io.Writer
}

// Server is a running local ExactOnce.
type Server struct {
	API     *httpapi.API
	Handler http.Handler
	DB      *dynamodb.Client
	Table   string
	Bus     *eventbus.Bus // nil unless Options.Events
	// DeadLetters is what the stream publisher and reader set aside (the
	// on-failure queue of the stack), at GET /_local/dead-letters.
	DeadLetters *streams.DeadLetters
	Publisher   *publish.Publisher // nil unless Options.Events
	Stream      *streams.Reader    // feeds Publisher (nil unless Options.Events): CaughtUp says all written is handled
	Sweeper     *sweep.Sweeper     // runs every Options.SweepEvery
	Metrics     *telemetry.Metrics
	ctx         context.Context
	stop        context.CancelFunc
	bg          sync.WaitGroup
}

// Close stops the background work (stream reader, sweeper) and the local bus.
func (s *Server) Close() {
	s.stop()
	s.bg.Wait()
	if s.Bus != nil {
		s.Bus.Close()
	}
}

// New creates the table if needed and wires the handlers.
func New(ctx context.Context, o Options) (*Server, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Log == nil {
		o.Log = app.Logger()
	}
	awsCfg := awsconfig.Local(o.DynamoDBEndpoint)
	if o.AWS != nil {
		awsCfg = *o.AWS
	}
	db := dynamodb.NewFromConfig(awsCfg)
	if err := store.CreateTable(ctx, db, o.Table, o.Events); err != nil {
		return nil, err
	}
	tenants, err := tenant.Parse(o.Tenants)
	if err != nil {
		return nil, err
	}
	cfg := config.Config{Table: o.Table, Retention: o.Retention, Secret: o.Secret, ExpiryShards: o.ExpiryShards,
		SecretSource: o.SecretSource, Tenants: tenants}
	if o.MetricsOut == nil {
		o.MetricsOut = io.Discard
	}
	metrics := telemetry.New(o.MetricsOut)
	api, err := app.New(ctx, cfg, awsCfg, o.Log, metrics)
	if err != nil {
		return nil, err
	}
	mux := gateway.New()
	for route, h := range api.Routes() {
		mux.Route(route, gateway.Handler(h))
	}
	mux.Handle("GET /openapi.yaml", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(openapi.OpenAPI) // fails only when the client went away
	}))
	mux.Handle("GET /_local/metrics", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		totals := metrics.Totals()
		if totals == nil {
			totals = []telemetry.Total{}
		}
		_ = json.NewEncoder(w).Encode(totals) // fails only when the client went away
	}))
	srv := &Server{API: api, Handler: sameOrigin(mux), DB: db, Table: o.Table, Metrics: metrics,
		Sweeper: &sweep.Sweeper{Store: app.Store(cfg, db), Log: o.Log, Metrics: metrics}}
	srv.ctx, srv.stop = context.WithCancel(context.Background())
	if o.SweepEvery > 0 {
		srv.background(func(ctx context.Context) {
			t := time.NewTicker(o.SweepEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if _, err := srv.Sweeper.Run(ctx); err != nil && ctx.Err() == nil {
						o.Log.Error("sweep failed", "error", err.Error())
					}
				}
			}
		})
	}
	if o.Events {
		if err := srv.startEvents(awsCfg, o); err != nil {
			return nil, err
		}
		mux.Handle("GET /_local/events", srv.Bus.Handler())
		mux.Handle("GET /_local/dead-letters", srv.DeadLetters.Handler())
		mux.Handle("POST /_local/republish", srv.republishHandler(o.Log))
	}
	return srv, nil
}

// startEvents runs the same publisher handler the Lambda runs, fed by the
// table's real stream, publishing through the real SDK client to a local bus.
func (s *Server) startEvents(awsCfg aws.Config, o Options) error {
	out := o.EventLog
	if out == nil {
		out = os.Stdout
	}
	bus, err := eventbus.New(out)
	if err != nil {
		return err
	}
	endpoint := bus.URL
	if o.EventBridgeVia != nil {
		endpoint = o.EventBridgeVia(bus.URL)
	}
	ebCfg := awsconfig.Local(endpoint)
	ebCfg.Retryer = awsCfg.Retryer // the SDK retries the caller chose (tests: short waits)
	dead := &streams.DeadLetters{}
	pub := publish.New(eventbridge.NewFromConfig(ebCfg), LocalBus, events.DefaultSource, o.Log)
	pub.Metrics = s.Metrics
	pub.Uses = store.New(s.DB, s.Table, store.Options{})
	pub.SetAside = func(_ context.Context, a publish.Aside) error { return dead.Add(a) }
	// The reader mirrors the stack's event source mapping: unlimited
	// retries up to the record age limit, then the on-failure queue.
	reader := &streams.Reader{
		DB: s.DB, Streams: dynamodbstreams.NewFromConfig(awsCfg), Table: s.Table,
		Handle: pub.Handle, Log: o.Log,
		RetryAttempts: publish.MappingRetryAttempts, MaxRecordAge: publish.MappingMaxRecordAge,
		SetAside: func(_ context.Context, f streams.OnFailure) { _ = dead.Add(f) },
	}
	if o.TuneEvents != nil {
		o.TuneEvents(pub, reader)
	}
	s.Bus, s.DeadLetters, s.Publisher, s.Stream = bus, dead, pub, reader
	s.background(func(ctx context.Context) {
		if err := reader.Run(ctx); err != nil && ctx.Err() == nil {
			o.Log.Error("stream reader stopped", "error", err.Error())
		}
	})
	return nil
}

// republishHandler runs the republish Lambda's handler on the local table
// and bus: POST /_local/republish with its input, {"from","to"?,"segments"?,
// "only"?}. Bad input is a 400 naming the field, as on the API.
func (s *Server) republishHandler(log *slog.Logger) http.Handler {
	r := &republish.Republisher{DB: s.DB, Table: s.Table, Publisher: s.Publisher, Log: log}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		in, err := decodeRepublish(http.MaxBytesReader(w, req.Body, 64<<10))
		if err == nil {
			err = in.Validate()
		}
		var bad *republish.RequestError
		if errors.As(err, &bad) {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_request", "message": bad.Field + " " + bad.Message, "field": bad.Field})
			return
		}
		res, err := r.Handle(req.Context(), in)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": "republish_failed", "message": err.Error(), "result": res})
			return
		}
		_ = json.NewEncoder(w).Encode(res)
	})
}

// decodeRepublish reads one republish.Request; what is not one is a
// *republish.RequestError naming the field (or "body").
func decodeRepublish(body io.Reader) (republish.Request, error) {
	var in republish.Request
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(&in)
	if err == nil && dec.More() {
		err = errors.New("holds more than one JSON value")
	}
	if err == nil {
		return in, nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return in, &republish.RequestError{Field: te.Field, Message: "must be a JSON " + te.Type.Kind().String()}
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return in, &republish.RequestError{Field: strings.Trim(f, `"`), Message: "is not a field of a republish request"}
	}
	if errors.Is(err, io.EOF) {
		return in, &republish.RequestError{Field: "from", Message: "is required"}
	}
	return in, &republish.RequestError{Field: "body", Message: "must be one JSON object: " + err.Error()}
}

// background runs f until Close.
func (s *Server) background(f func(context.Context)) {
	s.bg.Go(func() { f(s.ctx) })
}

// sameOrigin refuses what a browser marks as coming from another site: a
// web page the developer has open could otherwise POST to the local server
// (a simple cross-site POST needs no preflight). It also refuses a Host
// other than the address the connection reached (or localhost on a
// loopback one): a page whose own name was rebound to 127.0.0.1 (DNS
// rebinding) is same-origin to the browser, but its requests carry that
// name as Host. curl and other programs send no Origin and the Host they
// connected to, and pass.
func sameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		crossSite := r.Header.Get("Sec-Fetch-Site") == "cross-site" || origin != "" && origin != "http://"+r.Host
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		if crossSite || !hostIsListenAddr(r.Host, local) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":"forbidden","message":"cross-site requests and other host names are refused by the local server"}` + "\n"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostIsListenAddr reports whether a request's Host names the address its
// connection reached: that IP and port, or localhost and the port when the
// address is a loopback one. Without a known address (a handler called
// directly) there is nothing to check.
func hostIsListenAddr(host string, local net.Addr) bool {
	tcp, ok := local.(*net.TCPAddr)
	if !ok {
		return local == nil
	}
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		name, port = host, "80"
	}
	if port != strconv.Itoa(tcp.Port) {
		return false
	}
	listen, ok := netip.AddrFromSlice(tcp.IP)
	if !ok {
		return false
	}
	if strings.EqualFold(name, "localhost") {
		return listen.Unmap().IsLoopback()
	}
	ip, err := netip.ParseAddr(name)
	return err == nil && ip.Unmap() == listen.Unmap()
}
