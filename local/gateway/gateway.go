// Package gateway serves Lambda HTTP API handlers over net/http the way API
// Gateway's HTTP API (payload format 2.0) invokes them, so the local server
// and the tests run the exact functions the Lambdas run.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// HeaderCaller names, on the local server only, the IAM principal ARN the
// request is made as (API Gateway's IAM authorizer would have verified it
// from the SigV4 signature); absent, the caller is LocalPrincipal. A role's
// ARN arrives as API Gateway gives it, as a session of the role
// (CallerARN): a role signs only through sts:AssumeRole.
const HeaderCaller = "X-Exactonce-Caller"

// LocalPrincipal is the caller of a local request without HeaderCaller.
const LocalPrincipal = "arn:aws:iam::000000000000:role/exactonce-local"

// LocalSession is the session name of a local caller given as a role.
const LocalSession = "local"

// Handler is a Lambda HTTP API handler.
type Handler func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// MaxBodyBytes is API Gateway's payload limit (10 MB); larger requests get 413
// here as they would there.
const MaxBodyBytes = 10 << 20

var paramRE = regexp.MustCompile(`\{([A-Za-z0-9_]+)\}`)

// Mux routes requests by API Gateway route key ("POST /actions/{actionId}").
// Route keys are also net/http patterns, so ServeMux does the matching.
type Mux struct{ mux *http.ServeMux }

// New returns an empty Mux.
func New() *Mux { return &Mux{mux: http.NewServeMux()} }

// Route registers h under an API Gateway route key.
func (m *Mux) Route(routeKey string, h Handler) {
	params := paramRE.FindAllStringSubmatch(routeKey, -1)
	m.mux.HandleFunc(routeKey, func(w http.ResponseWriter, r *http.Request) {
		ev, err := Event(r, routeKey)
		if err != nil {
			status := http.StatusBadRequest
			if _, ok := err.(*http.MaxBytesError); ok {
				status = http.StatusRequestEntityTooLarge
			}
			writeJSON(w, status, map[string]string{"message": http.StatusText(status)})
			return
		}
		for _, p := range params {
			ev.PathParameters[p[1]] = r.PathValue(p[1])
		}
		resp, err := h(r.Context(), ev)
		if err != nil { // what API Gateway answers when the function fails
			writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "Internal Server Error"})
			return
		}
		Write(w, resp)
	})
}

// Handle registers a plain net/http handler (local-only routes).
func (m *Mux) Handle(pattern string, h http.Handler) { m.mux.Handle(pattern, h) }

// ServeHTTP routes r as an HTTP API does: on its decoded path, cut at a
// decoded '?' or '#' (DecodedPath), so an escaped '/' separates segments.
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := DecodedPath(r.URL); p != r.URL.Path || r.URL.RawPath != "" {
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = p, ""
		r = r2
	}
	// A route is a method and a path: net/http lets "GET /path" serve HEAD
	// too, an HTTP API does not; and net/http redirects a path with an empty
	// or dot segment (//actions, /a/../b) to its clean form, where an HTTP
	// API routes the path as sent: no route has such a path.
	_, pattern := m.mux.Handler(r)
	if method, _, hasMethod := strings.Cut(pattern, " "); pattern == "" || hasMethod && method != r.Method || !cleanPath(r.URL.Path) {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
		return
	}
	m.mux.ServeHTTP(w, r)
}

// cleanPath reports whether p has no empty, "." or ".." segment (a
// trailing '/' aside), as net/http's ServeMux would route it unredirected.
func cleanPath(p string) bool {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// DecodedPath is the path an HTTP API routes on and gives the function:
// the request's path percent-decoded, then cut at a decoded '?' or '#'.
// (So a path segment cannot carry '/', '?' or '#', and a '%' in it arrives
// decoded: /users/a%2Fb/actions is /users/a/b/actions.)
func DecodedPath(u *url.URL) string {
	p, err := url.PathUnescape(u.EscapedPath())
	if err != nil {
		p = u.Path
	}
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	return p
}

// textMedia reports whether an HTTP API passes a body of this Content-Type
// as text; any other body (form data, binary, no Content-Type) arrives
// base64-encoded (isBase64Encoded).
func textMedia(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"), strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	}
	switch mt {
	case "application/json", "application/xml", "application/javascript", "application/x-javascript":
		return true
	}
	return false
}

// Event builds the API Gateway v2 event for r: lower-cased headers (repeated
// ones joined by commas), raw and parsed query string, cookies, the body
// (base64 unless its Content-Type is text, as an HTTP API decides) and the
// request context, with the decoded path.
func Event(r *http.Request, routeKey string) (events.APIGatewayV2HTTPRequest, error) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBodyBytes))
	if err != nil {
		return events.APIGatewayV2HTTPRequest{}, err
	}
	now := time.Now()
	ev := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       routeKey,
		RawPath:        DecodedPath(r.URL),
		RawQueryString: r.URL.RawQuery,
		Headers:        map[string]string{},
		PathParameters: map[string]string{},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:   routeKey,
			AccountID:  "000000000000",
			Stage:      "$default",
			RequestID:  requestID(),
			APIID:      "local",
			DomainName: r.Host,
			Time:       now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:  now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      DecodedPath(r.URL),
				Protocol:  r.Proto,
				SourceIP:  sourceIP(r),
				UserAgent: r.UserAgent(),
			},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				IAM: IAMCaller(caller(r), "AKIALOCALCALLER"),
			},
		},
	}
	for k, v := range r.Header {
		if strings.EqualFold(k, "Cookie") {
			continue
		}
		ev.Headers[strings.ToLower(k)] = strings.Join(v, ",")
	}
	for _, line := range r.Header.Values("Cookie") { // as sent: net/http's parse unquotes and drops
		for c := range strings.SplitSeq(line, ";") {
			if c = strings.TrimSpace(c); c != "" {
				ev.Cookies = append(ev.Cookies, c)
			}
		}
	}
	if q := r.URL.Query(); len(q) > 0 {
		ev.QueryStringParameters = map[string]string{}
		for k, v := range q {
			ev.QueryStringParameters[k] = strings.Join(v, ",")
		}
	}
	switch {
	case len(body) == 0:
	case textMedia(r.Header.Get("Content-Type")):
		ev.Body = string(body)
	default:
		ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
	}
	return ev, nil
}

// Write sends a handler's response as API Gateway sends a payload 2.0 one:
// statusCode, headers, cookies (one Set-Cookie each) and body.
func Write(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) {
	// A 2.0 response has no multiValueHeaders: API Gateway drops them.
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	for _, c := range resp.Cookies {
		w.Header().Add("Set-Cookie", c)
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if b, err := base64.StdEncoding.DecodeString(resp.Body); err == nil {
			body = b
		}
	}
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// caller is the principal a local request is made as.
func caller(r *http.Request) string {
	if c := strings.TrimSpace(r.Header.Get(HeaderCaller)); c != "" {
		return CallerARN(c, LocalSession)
	}
	return CallerARN(LocalPrincipal, LocalSession)
}

// CallerARN is the principal ARN API Gateway's IAM authorizer gives for a
// caller: a role (arn:aws:iam::ACCOUNT:role/[PATH/]NAME) calls as one of its
// sessions, arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION (the path is not
// in it); any other ARN (a user, a session already) as it is.
func CallerARN(arn, session string) string {
	rest, ok := strings.CutPrefix(arn, "arn:")
	if !ok {
		return arn
	}
	f := strings.SplitN(rest, ":", 5) // partition, service, region, account, resource
	if len(f) != 5 || f[1] != "iam" {
		return arn
	}
	role, ok := strings.CutPrefix(f[4], "role/")
	if !ok {
		return arn
	}
	name := role[strings.LastIndex(role, "/")+1:]
	return "arn:" + f[0] + ":sts::" + f[3] + ":assumed-role/" + name + "/" + session
}

// IAMCaller is the IAM authorizer's description of a caller (its principal
// ARN as CallerARN gives it), as API Gateway fills it.
func IAMCaller(arn, accessKey string) *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription {
	account := "000000000000"
	if f := strings.SplitN(arn, ":", 6); len(f) == 6 {
		account = f[4]
	}
	id := "AIDALOCALCALLER"
	if i := strings.Index(arn, ":assumed-role/"); i >= 0 {
		_, session, _ := strings.Cut(arn[i+len(":assumed-role/"):], "/")
		id = "AROALOCALCALLER:" + session
	}
	return &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccessKey: accessKey, AccountID: account,
		CallerID: id, UserARN: arn, UserID: id}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func requestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sourceIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
