// Package api holds the OpenAPI 3.1 description of the HTTP API
// (openapi.yaml), which the local server serves at GET /openapi.yaml and a
// test checks real responses against, so the document cannot drift.
package api

import _ "embed"

// OpenAPI is the document, as YAML.
//
//go:embed openapi.yaml
var OpenAPI []byte
