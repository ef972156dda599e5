// Package server assembles the local ExactOnce: the Lambda handlers behind
// the API Gateway adapter, on a DynamoDB-compatible endpoint. The local
// command and the end-to-end tests both use it.
package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/local/gateway"
	"github.com/exactonce/exactonce/shared/app"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/httpapi"
	"github.com/exactonce/exactonce/shared/store"
)

// DefaultTable is the local table's name.
const DefaultTable = "exactonce-actions"

// Options configure New.
type Options struct {
	DynamoDBEndpoint string        // required: DynamoDB Local's URL
	Table            string        // default DefaultTable
	Secret           string        // the server secret (required)
	Retention        time.Duration // default store.DefaultRetention
	Log              *slog.Logger  // default app.Logger()
	// AWS, when set, is used instead of config.Local(DynamoDBEndpoint), e.g. to
	// put a counting or fault-injecting transport in the path.
	AWS *aws.Config
}

// Server is a running local ExactOnce.
type Server struct {
	API     *httpapi.API
	Handler http.Handler
	DB      *dynamodb.Client
	Table   string
}

// New creates the table if needed and wires the handlers.
func New(ctx context.Context, o Options) (*Server, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Log == nil {
		o.Log = app.Logger()
	}
	awsCfg := config.Local(o.DynamoDBEndpoint)
	if o.AWS != nil {
		awsCfg = *o.AWS
	}
	db := dynamodb.NewFromConfig(awsCfg)
	if err := store.CreateTable(ctx, db, o.Table); err != nil {
		return nil, err
	}
	api, err := app.New(ctx, config.Config{Table: o.Table, Retention: o.Retention, Secret: o.Secret}, awsCfg, o.Log)
	if err != nil {
		return nil, err
	}
	mux := gateway.New()
	for route, h := range api.Routes() {
		mux.Route(route, gateway.Handler(h))
	}
	return &Server{API: api, Handler: mux, DB: db, Table: o.Table}, nil
}
