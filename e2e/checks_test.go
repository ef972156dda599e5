//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/exactonce/exactonce/client"
	"github.com/exactonce/exactonce/e2e/emulator"
	"github.com/exactonce/exactonce/e2e/iam"
	"github.com/exactonce/exactonce/e2e/template"
	"github.com/exactonce/exactonce/local/faults"
	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/tenant"
)

// API callers: sessions of two tenants' roles and of one in no tenant (the
// tenant map the e2e template is synthesized with names acme-* and globex-*
// roles). IAM callers arrive as API Gateway gives them, as assumed-role
// sessions; JWT callers have the role's ARN as their token's sub.
type caller struct{ key, arn, sub string }

var (
	acme     = caller{"AKIACALLERACME", "arn:aws:sts::000000000000:assumed-role/acme-app/e2e", "arn:aws:iam::000000000000:role/acme-app"}
	globex   = caller{"AKIACALLERGLOBEX", "arn:aws:sts::000000000000:assumed-role/globex-app/e2e", "arn:aws:iam::000000000000:role/globex-app"}
	stranger = caller{"AKIACALLERSTRANGER", "arn:aws:sts::000000000000:assumed-role/stranger/e2e", "arn:aws:iam::000000000000:role/stranger"}
)

func callerARNs() map[string]string {
	return map[string]string{acme.key: acme.arn, globex.key: globex.arn, stranger.key: stranger.arn}
}

// eventWait bounds the wait for an event (they arrive in well under a
// second; the bound is for a loaded machine).
const eventWait = 30 * time.Second

type suite struct {
	t         *testing.T
	d         *emulator.Deployment
	ctx       context.Context
	n, failed int
	// declared checks, and those -run let run; steps already run.
	declared, ran int
	na            []string // checks that do not apply to this template
	steps         map[string]error
	stepFns       map[string]func() error
	run           string // suffix making this run's ids unique
	tenants       bool
	cognito       bool            // tokens are Cognito access tokens (client_id, no aud)
	jwt           *template.Route // the stack's routes use this JWT authorizer (nil: AWS_IAM)
	http          *http.Client
}

func newSuite(t *testing.T) *suite {
	return &suite{t: t, run: fmt.Sprint(time.Now().UnixNano() % 1e9), http: &http.Client{Timeout: 30 * time.Second}, steps: map[string]error{}, stepFns: map[string]func() error{}}
}

// check runs one check as a subtest; a failure prints "FAIL <name>: <why>"
// and the AWS calls denied during it (the usual cause when the template
// lost a permission).
func (s *suite) check(name string, f func() error) {
	s.declared++
	s.t.Run(name, func(t *testing.T) {
		s.ran++
		s.n++
		before := len(s.d.Proxy.Stats().Denied)
		if err := f(); err != nil {
			s.failed++
			var denied []string
			for _, d := range s.d.Proxy.Stats().Denied[before:] {
				denied = append(denied, "\n     denied: "+d)
			}
			fmt.Printf("FAIL %s: %v%s\n", name, err, strings.Join(denied, ""))
			t.Errorf("%v%s", err, strings.Join(denied, ""))
			return
		}
		fmt.Printf("ok   %s\n", name)
	})
}

// notApplicable says why a check does not run on this template: a
// condition the template shows (a table without TTL has no TTL deletions).
// The summary counts them.
func (s *suite) notApplicable(name, why string) {
	s.na = append(s.na, name)
	fmt.Printf("n/a  %s: %s\n", name, why)
}

// checkStep is a check that is also a step other checks may need (see need).
func (s *suite) checkStep(name, key string, f func() error) {
	s.stepFns[key] = f
	s.check(name, func() error { return s.step(key, f) })
}

// need runs the steps a check depends on (each once per suite).
func (s *suite) need(keys ...string) error {
	for _, k := range keys {
		f, ok := s.stepFns[k]
		if !ok {
			return fmt.Errorf("no step %q", k)
		}
		if err := s.step(k, f); err != nil {
			return fmt.Errorf("step %q: %w", k, err)
		}
	}
	return nil
}

// step runs f once per suite under key and returns its error ever after:
// what a check needs done first (an action created, consumed, …), whether
// the check that does it ran before or -run left it out.
func (s *suite) step(key string, f func() error) error {
	if err, ok := s.steps[key]; ok {
		return err
	}
	err := f()
	s.steps[key] = err
	return err
}

type resp struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (r resp) str(k string) string { s, _ := r.body[k].(string); return s }

// call makes one request as c (nil: unsigned) through the project's client
// (client.Send: no retry, the answer as it came): signed with SigV4 for an
// IAM stack, with c's token for a JWT one (made per call: a check may
// change the authorizer the tokens are for).
func (s *suite) call(c *caller, method, path string, body any, hdr ...string) resp {
	var b []byte
	if body != nil {
		if raw, ok := body.(string); ok {
			b = []byte(raw)
		} else {
			b, _ = json.Marshal(body)
		}
	}
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	opts := []client.Option{client.WithHTTPClient(s.http)}
	switch {
	case c != nil && s.jwt != nil:
		h.Set("Authorization", "Bearer "+s.token(c))
	case c != nil:
		creds := credentials.NewStaticCredentialsProvider(c.key, "caller-secret", "")
		opts = append(opts, client.WithSigV4(aws.Config{Region: s.d.Region, Credentials: creds}))
	}
	r, err := client.New(s.d.URL, opts...).Send(s.ctx, method, path, b, h)
	if err != nil {
		return resp{status: -1, raw: err.Error()}
	}
	out := resp{status: r.StatusCode, header: r.Header, raw: string(r.Body)}
	_ = json.Unmarshal(r.Body, &out.body)
	return out
}

// token is a JWT for c as the stack's authorizer accepts it: its issuer and
// audience, every route's scope, c's principal as sub (the tenant claim).
func (s *suite) token(c *caller) string {
	var scopes []string
	for _, r := range s.d.Stack.Routes {
		scopes = append(scopes, r.Scopes...)
	}
	aud := ""
	if len(s.jwt.Audience) > 0 {
		aud = s.jwt.Audience[0]
	}
	claims := map[string]any{"iss": s.jwt.Issuer, "sub": c.sub, "scope": strings.Join(scopes, " "),
		"iat": time.Now().Add(-time.Minute).Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	if s.cognito {
		claims["client_id"], claims["token_use"] = aud, "access" // a Cognito access token has no aud
	} else {
		claims["aud"] = aud
	}
	enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
	return enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + enc(claims) + ".e2e-unsigned"
}

// expect checks a response's status and, when code is set, its error code.
func expect(r resp, status int, code string) error {
	if r.status != status {
		return fmt.Errorf("status %d, want %d: %s", r.status, status, truncate(r.raw))
	}
	if code != "" && r.str("error") != code {
		return fmt.Errorf("error %q, want %q: %s", r.str("error"), code, truncate(r.raw))
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// eventually polls f until it succeeds or the bound passes.
func (s *suite) eventually(bound time.Duration, f func() error) error {
	deadline := time.Now().Add(bound)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || s.ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *suite) id(name string) string { return name + "-" + s.run }

// event finds a bus event of a type for an action.
func (s *suite) event(detailType, actionID string) (map[string]any, int) {
	var found map[string]any
	n := 0
	for _, ev := range s.d.Bus.Events() {
		if ev.DetailType != detailType {
			continue
		}
		var detail map[string]any
		if json.Unmarshal(ev.Detail, &detail) == nil && detail["actionId"] == actionID {
			found = detail
			n++
		}
	}
	return found, n
}

// useEvents counts the bus events of a type for one use of an action.
func (s *suite) useEvents(detailType, actionID, useID string) int {
	n := 0
	for _, ev := range s.d.Bus.Events() {
		var detail map[string]any
		if ev.DetailType == detailType && json.Unmarshal(ev.Detail, &detail) == nil && detail["actionId"] == actionID && detail["useId"] == useID {
			n++
		}
	}
	return n
}

func (s *suite) waitEvent(detailType, actionID string) error {
	return s.eventually(eventWait, func() error {
		if ev, _ := s.event(detailType, actionID); ev == nil {
			return fmt.Errorf("no %s event for %s on the bus within %s (published: %d events)", detailType, actionID, eventWait, len(s.d.Bus.Events()))
		}
		return nil
	})
}

// runAll runs the checks. New routes need a check here: the route coverage
// check at the end fails for a route of the template no check called.
func (s *suite) runAll() {
	d := s.d
	if f := d.Stack.Functions["create"]; f != nil {
		s.tenants = f.Env[config.EnvTenants] != "" || f.Env[config.EnvTenantsParameter] != ""
	}
	for i, r := range d.Stack.Routes {
		if r.AuthorizationType == "JWT" {
			s.jwt = &d.Stack.Routes[i]
		}
	}
	a := &acme
	start := time.Now().UTC().Add(-time.Second)

	// --- actions: create, get, consume, cancel and their outcome classes.
	s.checkStep("POST /actions: 201 created", "a1", func() error {
		return expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("a1"), "userId": "u1", "metadata": map[string]string{"k": "v"}}), 201, "")
	})
	s.check("POST /actions: Idempotency-Key replay answers the first response", func() error {
		body := map[string]any{"userId": "u1"}
		r1 := s.call(a, "POST", "/actions", body, "Idempotency-Key", s.id("ik1"))
		r2 := s.call(a, "POST", "/actions", body, "Idempotency-Key", s.id("ik1"))
		if err := expect(r1, 201, ""); err != nil {
			return err
		}
		if r2.status != 201 || r2.str("actionId") != r1.str("actionId") || r2.header.Get("Idempotent-Replayed") != "true" {
			return fmt.Errorf("replay %d %s (replayed %q), first %s", r2.status, r2.raw, r2.header.Get("Idempotent-Replayed"), r1.str("actionId"))
		}
		return expect(s.call(a, "POST", "/actions", map[string]any{"userId": "u2"}, "Idempotency-Key", s.id("ik1")), 422, "idempotency_key_reused")
	})
	s.check("POST /actions: 409 action_exists", func() error {
		if err := s.need("a1"); err != nil {
			return err
		}
		return expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("a1"), "userId": "u1"}), 409, "action_exists")
	})
	s.check("POST /actions: 400 names the field, nothing written", func() error {
		r := s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("bad"), "userId": ""})
		if err := expect(r, 400, "invalid_request"); err != nil {
			return err
		}
		if r.str("field") != "userId" {
			return fmt.Errorf("field %q, want userId", r.str("field"))
		}
		return expect(s.call(a, "GET", "/actions/"+s.id("bad"), nil), 404, "action_not_found")
	})
	s.check("POST /actions: a form-encoded body (curl -d) arrives base64-encoded and is read", func() error {
		return expect(s.call(a, "POST", "/actions", `{"actionId":"`+s.id("form")+`","userId":"u1"}`, "Content-Type", "application/x-www-form-urlencoded"), 201, "")
	})
	s.check("userId: one no URL reaches (/, ?, #, %) is 400 naming userId; spaces and accents are listed through the escaped path", func() error {
		for _, u := range []string{"team/alice", "who?", "u#1", "100%"} {
			r := s.call(a, "POST", "/actions", map[string]any{"userId": u})
			if err := expect(r, 400, "invalid_request"); err != nil {
				return fmt.Errorf("userId %q: %w", u, err)
			}
			if r.str("field") != "userId" {
				return fmt.Errorf("userId %q: field %q, want userId", u, r.str("field"))
			}
		}
		u := "Zoë Smith " + s.run
		if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("zoe"), "userId": u}), 201, ""); err != nil {
			return err
		}
		r := s.call(a, "GET", "/users/"+url.PathEscape(u)+"/actions", nil)
		if err := expect(r, 200, ""); err != nil {
			return err
		}
		if !strings.Contains(r.raw, s.id("zoe")) {
			return fmt.Errorf("the listing of %q lacks %s: %s", u, s.id("zoe"), truncate(r.raw))
		}
		return nil
	})
	s.check("GET /actions/{actionId}: 200 active, 404 unknown", func() error {
		if err := s.need("a1"); err != nil {
			return err
		}
		r := s.call(a, "GET", "/actions/"+s.id("a1"), nil)
		if err := expect(r, 200, ""); err != nil {
			return err
		}
		if r.str("state") != "active" {
			return fmt.Errorf("state %q", r.str("state"))
		}
		return expect(s.call(a, "GET", "/actions/"+s.id("nope"), nil), 404, "action_not_found")
	})
	s.checkStep("POST /actions/{actionId}/consume: 200 consumed, then 409 already_used", "a1 consumed", func() error {
		if err := s.need("a1"); err != nil {
			return err
		}
		r := s.call(a, "POST", "/actions/"+s.id("a1")+"/consume", map[string]any{"reason": "checkout"})
		if err := expect(r, 200, ""); err != nil {
			return err
		}
		if r.str("state") != "consumed" {
			return fmt.Errorf("state %q", r.str("state"))
		}
		return expect(s.call(a, "POST", "/actions/"+s.id("a1")+"/consume", map[string]any{}), 409, "already_used")
	})
	s.checkStep("POST /actions/{actionId}/cancel: 200 canceled, consume then 410 canceled", "c1 canceled", func() error {
		if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("c1"), "userId": "u1"}), 201, ""); err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", "/actions/"+s.id("c1")+"/cancel", map[string]any{"reason": "user asked"}), 200, ""); err != nil {
			return err
		}
		return expect(s.call(a, "POST", "/actions/"+s.id("c1")+"/consume", map[string]any{}), 410, "canceled")
	})
	s.check("consume: 409 not_active before activeAt", func() error {
		at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("later"), "userId": "u3", "activeAt": at}), 201, ""); err != nil {
			return err
		}
		return expect(s.call(a, "POST", "/actions/"+s.id("later")+"/consume", map[string]any{}), 409, "not_active")
	})
	s.checkStep("PIN: pin_required, invalid_pin, locked; the right PIN consumes", "pin", func() error {
		if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("pin"), "userId": "u1", "pin": "482913", "maxPinAttempts": 2}), 201, ""); err != nil {
			return err
		}
		p := "/actions/" + s.id("pin") + "/consume"
		if err := expect(s.call(a, "POST", p, map[string]any{}), 403, "pin_required"); err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", p, map[string]any{"pin": "000000"}), 403, "invalid_pin"); err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", p, map[string]any{"pin": "000001"}), 403, "invalid_pin"); err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", p, map[string]any{"pin": "482913"}), 423, "locked"); err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("pin2"), "userId": "u1", "pin": "482913"}), 201, ""); err != nil {
			return err
		}
		return expect(s.call(a, "POST", "/actions/"+s.id("pin2")+"/consume", map[string]any{"pin": "482913"}), 200, "")
	})
	s.check("payload: sealed at create, returned once by consume, never by get", func() error {
		if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("pay"), "userId": "u1", "payload": map[string]any{"code": "S3CRET"}}), 201, ""); err != nil {
			return err
		}
		if g := s.call(a, "GET", "/actions/"+s.id("pay"), nil); strings.Contains(g.raw, "S3CRET") {
			return fmt.Errorf("get returned the payload: %s", g.raw)
		}
		r := s.call(a, "POST", "/actions/"+s.id("pay")+"/consume", map[string]any{})
		if err := expect(r, 200, ""); err != nil {
			return err
		}
		if !strings.Contains(r.raw, "S3CRET") {
			return fmt.Errorf("consume did not return the payload: %s", truncate(r.raw))
		}
		return nil
	})

	// --- tenants (IAM callers), when the template has a tenant map.
	if s.jwt != nil {
		s.check("auth: a request without a token is 401 at the gateway, a wrong audience too", func() error {
			if err := expect(s.call(nil, "GET", "/actions/"+s.id("a1"), nil), 401, ""); err != nil {
				return err
			}
			good := *s.jwt
			s.jwt = &template.Route{Issuer: good.Issuer, Audience: []string{"someone-else"}}
			r := s.call(a, "GET", "/actions/"+s.id("a1"), nil)
			s.jwt = &good
			return expect(r, 401, "")
		})
		s.check("auth: a Cognito access token (client_id, no aud) is accepted, its tenant from sub", func() error {
			s.cognito = true
			defer func() { s.cognito = false }()
			if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("cognito"), "userId": "u1"}), 201, ""); err != nil {
				return err
			}
			return expect(s.call(&globex, "GET", "/actions/"+s.id("cognito"), nil), 404, "action_not_found")
		})
	} else {
		s.check("auth: an unsigned request is 403 at the gateway", func() error {
			return expect(s.call(nil, "GET", "/actions/"+s.id("a1"), nil), 403, "")
		})
	}
	if s.tenants {
		s.check("tenants: another tenant's action is 404, a caller in no tenant 403", func() error {
			if err := s.need("a1"); err != nil {
				return err
			}
			if err := expect(s.call(&globex, "GET", "/actions/"+s.id("a1"), nil), 404, "action_not_found"); err != nil {
				return err
			}
			if err := expect(s.call(&globex, "POST", "/actions", map[string]any{"actionId": s.id("a1"), "userId": "u1"}), 201, ""); err != nil {
				return fmt.Errorf("globex could not create its own %s: %w", s.id("a1"), err)
			}
			return expect(s.call(&stranger, "GET", "/actions/"+s.id("a1"), nil), 403, "forbidden")
		})
	}

	// --- users: list, supersede, cancel-all.
	s.check("GET /users/{userId}/actions lists the user's actions", func() error {
		if err := s.need("a1"); err != nil {
			return err
		}
		r := s.call(a, "GET", "/users/u1/actions", nil)
		if err := expect(r, 200, ""); err != nil {
			return err
		}
		if !strings.Contains(r.raw, s.id("a1")) {
			return fmt.Errorf("listing lacks %s: %s", s.id("a1"), truncate(r.raw))
		}
		return nil
	})
	s.checkStep("POST /actions with supersede cancels the user's active action of the kind", "supersede", func() error {
		if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("link1"), "userId": "u4", "kind": "login"}), 201, ""); err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("link2"), "userId": "u4", "kind": "login", "supersede": true}), 201, ""); err != nil {
			return err
		}
		r := s.call(a, "GET", "/actions/"+s.id("link1"), nil)
		if r.str("cancelReason") != "superseded" || r.str("canceledAt") == "" { // a canceled action reads as expired
			return fmt.Errorf("superseded action is %q: %s", r.str("state"), truncate(r.raw))
		}
		return nil
	})
	s.checkStep("POST /users/{userId}/actions/cancel cancels the user's active actions", "cancel-all", func() error {
		if err := s.need("supersede"); err != nil {
			return err
		}
		r := s.call(a, "POST", "/users/u4/actions/cancel", map[string]any{"reason": "logout"})
		if err := expect(r, 200, ""); err != nil {
			return err
		}
		if !strings.Contains(r.raw, s.id("link2")) {
			return fmt.Errorf("cancel-all did not cancel %s: %s", s.id("link2"), r.raw)
		}
		return nil
	})

	// --- keys: claim, complete, replay, release, get.
	s.checkStep("keys: claim 201, in_progress, complete, replay, get", "keys", func() error {
		k := "/keys/" + s.id("job1")
		r := s.call(a, "POST", k+"/claim", map[string]any{"fingerprint": "f1"})
		if err := expect(r, 201, ""); err != nil {
			return err
		}
		tok := r.str("token")
		if err := expect(s.call(&acme, "POST", k+"/claim", map[string]any{"fingerprint": "f1"}, "Idempotency-Key", s.id("other")), 409, "in_progress"); err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", k+"/complete", map[string]any{"token": tok, "response": map[string]any{"ok": true}}), 200, ""); err != nil {
			return err
		}
		rp := s.call(a, "POST", k+"/claim", map[string]any{"fingerprint": "f1"}, "Idempotency-Key", s.id("later-claim"))
		if err := expect(rp, 200, ""); err != nil {
			return err
		}
		if !strings.Contains(rp.raw, `"ok":true`) {
			return fmt.Errorf("replay lacks the stored response: %s", rp.raw)
		}
		g := s.call(a, "GET", k, nil)
		if err := expect(g, 200, ""); err != nil {
			return err
		}
		if g.str("state") != "completed" {
			return fmt.Errorf("state %q", g.str("state"))
		}
		return expect(s.call(a, "GET", "/keys/"+s.id("nokey"), nil), 404, "key_not_found")
	})
	s.check("keys: release lets the next claim in", func() error {
		k := "/keys/" + s.id("job2")
		r := s.call(a, "POST", k+"/claim", map[string]any{"fingerprint": "f2"})
		if err := expect(r, 201, ""); err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", k+"/release", map[string]any{"token": r.str("token"), "error": "downstream 503"}), 200, ""); err != nil {
			return err
		}
		return expect(s.call(a, "POST", k+"/claim", map[string]any{"fingerprint": "f2"}, "Idempotency-Key", s.id("retry")), 201, "")
	})

	// --- multi-use actions: takes by useId, releases, the uses listing.
	seats, coupon := s.id("seats"), s.id("coupon")
	s.checkStep("multi-use: create with maxUses and releasable answers the counts", "seats", func() error {
		r := s.call(a, "POST", "/actions", map[string]any{"actionId": seats, "userId": "u8", "kind": "licence", "maxUses": 2, "releasable": true, "payload": map[string]any{"key": "LIC-E2E"}})
		if err := expect(r, 201, ""); err != nil {
			return err
		}
		if r.body["maxUses"] != 2.0 || r.body["releasable"] != true || r.body["usesHeld"] != 0.0 || r.body["usesRemaining"] != 2.0 {
			return fmt.Errorf("created: %s", truncate(r.raw))
		}
		return expect(s.call(a, "POST", "/actions", map[string]any{"actionId": coupon, "userId": "u8", "maxUses": 2}), 201, "")
	})
	var laptopAt string
	s.checkStep("multi-use: takes by useId, a repeat answers its first 200, then 409 no_uses_left", "takes", func() error {
		if err := s.need("seats"); err != nil {
			return err
		}
		p := "/actions/" + seats + "/consume"
		if err := expect(s.call(a, "POST", p, map[string]any{}), 400, "invalid_request"); err != nil {
			return fmt.Errorf("consume without useId: %w", err)
		}
		r := s.call(a, "POST", p, map[string]any{"useId": "laptop"})
		if err := expect(r, 200, ""); err != nil {
			return err
		}
		laptopAt = r.str("usedAt")
		if r.str("useId") != "laptop" || laptopAt == "" || r.body["maxUses"] != 2.0 || !strings.Contains(r.raw, "LIC-E2E") {
			return fmt.Errorf("first take: %s", truncate(r.raw))
		}
		if r := s.call(a, "POST", p, map[string]any{"useId": "phone"}); r.status != 200 || r.str("useId") != "phone" {
			return fmt.Errorf("second take: %d %s", r.status, truncate(r.raw))
		}
		if r := s.call(a, "GET", "/actions/"+seats, nil); r.body["usesHeld"] != 2.0 || r.body["usesRemaining"] != 0.0 {
			return fmt.Errorf("GET after two takes (usesHeld 2, usesRemaining 0): %s", truncate(r.raw))
		}
		if r := s.call(a, "POST", p, map[string]any{"useId": "laptop"}); r.status != 200 || r.str("usedAt") != laptopAt || r.str("useId") != "laptop" {
			return fmt.Errorf("repeated take is not its first answer (usedAt %s): %d %s", laptopAt, r.status, truncate(r.raw))
		}
		r = s.call(a, "POST", p, map[string]any{"useId": "desktop"})
		if err := expect(r, 409, "no_uses_left"); err != nil {
			return err
		}
		if r.body["maxUses"] != 2.0 {
			return fmt.Errorf("no_uses_left without maxUses 2: %s", truncate(r.raw))
		}
		return nil
	})
	s.checkStep("multi-use: release 200, its keyed re-send the same, an unkeyed repeat 404; the freed use is taken", "release", func() error {
		if err := s.need("takes"); err != nil {
			return err
		}
		p := "/actions/" + seats + "/uses/phone/release"
		key := s.id("release-phone")
		r1 := s.call(a, "POST", p, nil, "Idempotency-Key", key)
		if err := expect(r1, 200, ""); err != nil {
			return err
		}
		if r1.str("useId") != "phone" || r1.str("releasedAt") == "" {
			return fmt.Errorf("release: %s", truncate(r1.raw))
		}
		if r2 := s.call(a, "POST", p, nil, "Idempotency-Key", key); r2.status != 200 || r2.str("releasedAt") != r1.str("releasedAt") {
			return fmt.Errorf("keyed re-sent release %d %s, first %s", r2.status, truncate(r2.raw), r1.raw)
		}
		if err := expect(s.call(a, "POST", p, nil), 404, "use_not_found"); err != nil {
			return fmt.Errorf("unkeyed repeat of a release: %w", err)
		}
		r := s.call(a, "POST", "/actions/"+seats+"/consume", map[string]any{"useId": "desktop"})
		if err := expect(r, 200, ""); err != nil {
			return err
		}
		if r := s.call(a, "GET", "/actions/"+seats, nil); r.body["usesHeld"] != 2.0 {
			return fmt.Errorf("GET after the take that followed the release (usesHeld 2): %s", truncate(r.raw))
		}
		return nil
	})
	s.check("multi-use: release of a useId holding no use 404 use_not_found, of a non-releasable action 409 not_releasable", func() error {
		if err := s.need("seats"); err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", "/actions/"+seats+"/uses/nobody/release", nil), 404, "use_not_found"); err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", "/actions/"+coupon+"/consume", map[string]any{"useId": "cust1"}), 200, ""); err != nil {
			return err
		}
		return expect(s.call(a, "POST", "/actions/"+coupon+"/uses/cust1/release", nil), 409, "not_releasable")
	})
	s.check("GET /actions/{actionId}/uses lists the held uses, 404 for an unknown action", func() error {
		if err := s.need("release"); err != nil {
			return err
		}
		r := s.call(a, "GET", "/actions/"+seats+"/uses", nil)
		if err := expect(r, 200, ""); err != nil {
			return err
		}
		var got []string
		uses, _ := r.body["uses"].([]any)
		for _, u := range uses {
			m, _ := u.(map[string]any)
			id, _ := m["useId"].(string)
			got = append(got, id)
			if id == "laptop" && m["usedAt"] != laptopAt {
				return fmt.Errorf("laptop's usedAt %v, want %s", m["usedAt"], laptopAt)
			}
		}
		if strings.Join(got, ",") != "desktop,laptop" || strings.Contains(r.raw, "LIC-E2E") {
			return fmt.Errorf("uses %v, want desktop,laptop (useId order, the released phone gone, no payload): %s", got, truncate(r.raw))
		}
		return expect(s.call(a, "GET", "/actions/"+s.id("nope")+"/uses", nil), 404, "action_not_found")
	})
	if s.tenants {
		s.check("multi-use: another tenant's take, release and listing are 404", func() error {
			if err := s.need("release"); err != nil {
				return err
			}
			g := &globex
			if err := expect(s.call(g, "POST", "/actions/"+seats+"/consume", map[string]any{"useId": "intruder"}), 404, "action_not_found"); err != nil {
				return fmt.Errorf("consume: %w", err)
			}
			if err := expect(s.call(g, "POST", "/actions/"+seats+"/uses/laptop/release", nil), 404, "action_not_found"); err != nil {
				return fmt.Errorf("release: %w", err)
			}
			if err := expect(s.call(g, "GET", "/actions/"+seats+"/uses", nil), 404, "action_not_found"); err != nil {
				return fmt.Errorf("listing: %w", err)
			}
			if r := s.call(a, "GET", "/actions/"+seats, nil); r.body["usesHeld"] != 2.0 {
				return fmt.Errorf("after the other tenant's calls: %s", truncate(r.raw))
			}
			return nil
		})
	}

	// --- expiry: the sweeper's schedule marks a due action expired (the
	// schedule that sends it the scheduled event; a multi-Region stack's
	// other one sends {"purge":true}).
	var sweep, purge *template.Rule
	for i, rl := range s.d.Stack.Rules {
		for _, t := range rl.Targets {
			switch {
			case t != "sweeper" || rl.Schedule == "":
			case rl.Inputs[t] == "":
				sweep = &s.d.Stack.Rules[i]
			case strings.Contains(rl.Inputs[t], `"purge":true`):
				purge = &s.d.Stack.Rules[i]
			}
		}
	}
	s.checkStep("sweeper: its schedule rule runs it; a due action becomes expired (410)", "expired", func() error {
		if sweep == nil {
			return fmt.Errorf("no schedule rule targets the sweeper")
		}
		exp := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
		if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("exp"), "userId": "u5", "expiresAt": exp}), 201, ""); err != nil {
			return err
		}
		return s.eventually(20*time.Second, func() error {
			if err := s.d.RunSchedule(s.ctx, *sweep); err != nil {
				return err
			}
			r := s.call(a, "GET", "/actions/"+s.id("exp"), nil)
			if r.str("state") != "expired" || r.str("expiredAt") == "" {
				return fmt.Errorf("the sweeper did not mark it: %s\n    sweeper output: %s", truncate(r.raw), tail(s.d.Output("sweeper"), 600))
			}
			return expect(s.call(a, "POST", "/actions/"+s.id("exp")+"/consume", map[string]any{}), 410, "expired")
		})
	})

	// --- events of every transition, through the stream mapping, on the bus.
	s.check("events: consumed, canceled (cancel, supersede, cancel-all), expired published", func() error {
		if err := s.need("a1 consumed", "pin", "c1 canceled", "cancel-all", "expired"); err != nil {
			return err
		}
		for _, c := range []struct{ typ, id string }{
			{"action.consumed", s.id("a1")}, {"action.consumed", s.id("pin2")}, {"action.canceled", s.id("c1")},
			{"action.canceled", s.id("link1")}, {"action.canceled", s.id("link2")}, {"action.expired", s.id("exp")},
		} {
			if err := s.waitEvent(c.typ, c.id); err != nil {
				return err
			}
		}
		if ev, _ := s.event("action.consumed", s.id("pay")); ev != nil && strings.Contains(fmt.Sprint(ev), "S3CRET") {
			return fmt.Errorf("an event carries the payload")
		}
		if s.tenants {
			if ev, _ := s.event("action.consumed", s.id("a1")); ev["tenant"] != "acme" {
				return fmt.Errorf("consumed event's tenant %v, want acme", ev["tenant"])
			}
		}
		return nil
	})
	s.check("events: action.used per take, action.use_released per release, never action.consumed", func() error {
		if err := s.need("release"); err != nil {
			return err
		}
		for _, c := range []struct{ typ, use string }{
			{"action.used", "laptop"}, {"action.used", "phone"}, {"action.used", "desktop"}, {"action.use_released", "phone"},
		} {
			if err := s.eventually(eventWait, func() error {
				if s.useEvents(c.typ, seats, c.use) == 0 {
					return fmt.Errorf("no %s event for %s use %s on the bus within %s", c.typ, seats, c.use, eventWait)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if n := s.useEvents("action.used", seats, "laptop"); n != 1 {
			return fmt.Errorf("%d action.used events for laptop (taken once, asked twice), want 1", n)
		}
		if ev, _ := s.event("action.used", seats); strings.Contains(fmt.Sprint(ev), "LIC-E2E") {
			return fmt.Errorf("an action.used event carries the payload: %v", ev)
		}
		if _, n := s.event("action.consumed", seats); n != 0 {
			return fmt.Errorf("a multi-use action published action.consumed")
		}
		return nil
	})
	s.check("events: key items never reach the publisher (the mapping's filter)", func() error {
		if err := s.need("keys"); err != nil {
			return err
		}
		for _, ev := range s.d.Bus.Events() {
			if strings.Contains(string(ev.Detail), s.id("job1")) {
				return fmt.Errorf("an event for a key item: %s", ev.Detail)
			}
		}
		return nil
	})
	if s.d.Stack.Functions["audit"] != nil {
		s.check("example subscriber: the bus rule delivers every event to it, each audited once", func() error {
			return s.eventually(20*time.Second, func() error {
				want := map[string]bool{}
				for _, ev := range s.d.Bus.Events() {
					want[ev.ID] = true
				}
				for _, dl := range s.d.Deliveries() {
					if dl.Target != "audit" {
						continue
					}
					if dl.Err != nil {
						return fmt.Errorf("audit failed: %v", dl.Err)
					}
					var env struct{ ID string }
					_ = json.Unmarshal(dl.Event, &env)
					delete(want, env.ID)
				}
				if len(want) > 0 {
					return fmt.Errorf("%d events not delivered to audit", len(want))
				}
				if out := s.d.Output("audit"); !strings.Contains(out, s.id("a1")) {
					return fmt.Errorf("audit logged no line for %s", s.id("a1"))
				}
				return nil
			})
		})
	}

	// --- a poison record: reported, then set aside on the on-failure queue.
	pub := s.d.Stack.Functions["publisher"]
	s.check("poison record: set aside on ON_FAILURE_QUEUE_URL, the events around it published", func() error {
		if pub == nil {
			return fmt.Errorf("the template has no publisher")
		}
		table := s.d.Stack.Functions["create"].Env["TABLE_NAME"]
		q := queueOf(s.d, pub.Env["ON_FAILURE_QUEUE_URL"])
		before := len(s.d.Fake.Messages(q))
		id := "poison-" + s.run
		_, err := s.d.DB.PutItem(s.ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"actionId": &types.AttributeValueMemberS{Value: id}, "userId": &types.AttributeValueMemberS{Value: "u-poison"},
			"consumedAt": &types.AttributeValueMemberS{Value: "not a time"}, "state": &types.AttributeValueMemberS{Value: "consumed"},
		}})
		if err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("after-poison"), "userId": "u6"}), 201, ""); err != nil {
			return err
		}
		if err := expect(s.call(a, "POST", "/actions/"+s.id("after-poison")+"/consume", map[string]any{}), 200, ""); err != nil {
			return err
		}
		if err := s.waitEvent("action.consumed", s.id("after-poison")); err != nil {
			return err
		}
		return s.eventually(30*time.Second, func() error {
			for _, m := range s.d.Fake.Messages(q)[before:] {
				if strings.Contains(m, id) {
					return nil
				}
			}
			return fmt.Errorf("no message about %s on %s", id, q)
		})
	})

	// --- deletions: DynamoDB's TTL on a table with TTL; on one without (an
	// MRSC global table: a multi-Region stack's), the sweeper's purge.
	ttlCheck := "TTL deletion: its REMOVE record (userIdentity dynamodb.amazonaws.com) publishes action.expired; another delete nothing"
	table := s.d.Stack.Functions["create"].Env["TABLE_NAME"]
	if s.d.TableTTL(table) == "" {
		s.notApplicable(ttlCheck, fmt.Sprintf("table %s has no TimeToLiveSpecification (%s), so DynamoDB deletes nothing by TTL", table, s.d.TableOrigin(table)))
	} else {
		s.check(ttlCheck, s.ttlDeletion(a, table))
	}
	const purgeCheck = "purge: its schedule runs the sweeper with {\"purge\":true}; a finished action past its retention is deleted, publishing nothing; an open one is kept"
	if purge == nil {
		s.notApplicable(purgeCheck, fmt.Sprintf("no schedule rule sends the sweeper {\"purge\":true} (table %s has TTL %q)", table, s.d.TableTTL(table)))
	} else {
		s.check(purgeCheck, s.purge(a, table, *purge))
	}

	// --- EventBridge refusing single entries: a non-retryable code sets the
	// record aside within minutes, with the event and the error; a
	// retryable one is retried until accepted.
	s.check("refused event: a non-retryable entry error sets its record aside with the event and error; a retryable one is retried", func() error {
		if pub == nil {
			return fmt.Errorf("the template has no publisher")
		}
		q := queueOf(s.d, pub.Env["ON_FAILURE_QUEUE_URL"])
		before := len(s.d.Fake.Messages(q))
		bad, slow := s.id("refused"), s.id("throttled")
		s.d.BusFault.FailEntries(faults.EntryFault{Match: bad, Code: "MalformedDetail"})
		s.d.BusFault.FailEntries(faults.EntryFault{Match: slow, Code: "ThrottlingException", Times: 2})
		defer s.d.BusFault.ClearEntryFaults()
		for _, id := range []string{bad, slow} {
			if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": id, "userId": "u9"}), 201, ""); err != nil {
				return err
			}
			if err := expect(s.call(a, "POST", "/actions/"+id+"/consume", map[string]any{}), 200, ""); err != nil {
				return err
			}
		}
		consumed := time.Now()
		if err := s.waitEvent("action.consumed", slow); err != nil {
			return fmt.Errorf("the throttled entry was not retried until accepted: %w", err)
		}
		var took time.Duration
		err := s.eventually(3*time.Minute, func() error {
			for _, m := range s.d.Fake.Messages(q)[before:] {
				if strings.Contains(m, bad) && strings.Contains(m, `"errorCode":"MalformedDetail"`) && strings.Contains(m, `"detailType":"action.consumed"`) {
					took = time.Since(consumed)
					return nil
				}
			}
			return fmt.Errorf("no message with the refused event of %s and its error on %s", bad, q)
		})
		if err != nil {
			return err
		}
		if ev, _ := s.event("action.consumed", bad); ev != nil {
			return fmt.Errorf("the refused event reached the bus")
		}
		fmt.Printf("     (refused event set aside %s after its consume)\n", took.Round(100*time.Millisecond))
		return nil
	})

	// --- the mapping's on-failure destination: EventBridge down longer than
	// the (scaled) record age: the batch is set aside there; republish
	// brings its event back.
	for _, m := range s.d.Stack.Mappings {
		s.checkStep("mapping "+m.LogicalID+": records past MaximumRecordAge go to its on-failure destination", "outage", func() error {
			if m.OnFailure == "" {
				return fmt.Errorf("the mapping has no on-failure destination (DestinationConfig.OnFailure): records it gives up on are lost")
			}
			if m.MaximumRecordAgeSeconds <= 0 {
				return fmt.Errorf("the mapping has no MaximumRecordAgeInSeconds: a batch failing without end holds its shard until the stream's retention drops it")
			}
			q := ""
			for _, qu := range s.d.Stack.Queues {
				if qu.Arn == m.OnFailure {
					q = qu.Name
				}
			}
			if q == "" {
				return fmt.Errorf("on-failure destination %s is not a queue of the template", m.OnFailure)
			}
			before := len(s.d.Fake.Messages(q))
			s.d.BusFault.Down(true)
			defer s.d.BusFault.Down(false)
			if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": s.id("outage"), "userId": "u7"}), 201, ""); err != nil {
				return err
			}
			if err := expect(s.call(a, "POST", "/actions/"+s.id("outage")+"/consume", map[string]any{}), 200, ""); err != nil {
				return err
			}
			// Once the publisher has failed on it, the record is older than
			// the mapping's limit (its clock moves past it).
			if err := s.eventually(20*time.Second, func() error {
				if !strings.Contains(s.d.Output("publisher"), s.id("outage")) && s.d.BusFault.Counts().Unavailable == 0 {
					return fmt.Errorf("the publisher never tried the outage's record")
				}
				return nil
			}); err != nil {
				return err
			}
			s.d.AgeRecords(time.Duration(m.MaximumRecordAgeSeconds+60) * time.Second)
			defer s.d.AgeRecords(0)
			// The publisher's own retries of a failing PutEvents take ~30 s
			// before it returns the error the mapping retries on.
			return s.eventually(90*time.Second, func() error {
				for _, msg := range s.d.Fake.Messages(q)[before:] {
					if strings.Contains(msg, "RecordAgeExceeded") {
						return nil
					}
				}
				return fmt.Errorf("no RecordAgeExceeded batch on %s", q)
			})
		})
	}
	if s.d.Stack.Functions["republish"] != nil {
		s.check("republish: a window's events published again with the same ids (the set-aside one too)", func() error {
			if err := s.need("a1 consumed", "outage"); err != nil {
				return err
			}
			in, _ := json.Marshal(map[string]any{"from": start.Format(time.RFC3339)})
			out, err := s.d.Invoke(s.ctx, "republish", in)
			if err != nil {
				return err
			}
			var res struct{ Published, Matched int }
			_ = json.Unmarshal(out, &res)
			if res.Published == 0 || res.Published != res.Matched {
				return fmt.Errorf("republish: %s", out)
			}
			if _, n := s.event("action.consumed", s.id("a1")); n < 2 {
				return fmt.Errorf("consumed event of %s seen %d times, want the original and the republished one", s.id("a1"), n)
			}
			return s.waitEvent("action.consumed", s.id("outage"))
		})
	}

	// --- the bus policy: only the publisher and republish roles publish
	// ExactOnce's source, whatever other roles' own policies allow.
	for _, b := range s.d.Stack.Buses {
		if b.Policy == nil || pub == nil {
			continue
		}
		s.check("bus policy: a role allowed PutEvents by its own policy still cannot publish source "+pub.Env["EVENT_SOURCE"], func() error {
			allowAll := []iam.Policy{{Name: "own", Policy: map[string]any{"Version": "2012-10-17", "Statement": []any{
				map[string]any{"Effect": "Allow", "Action": "events:PutEvents", "Resource": b.Arn}}}}}
			ask := func(role string) (string, error) {
				dec, err := s.d.Proxy.Eval.Evaluate(iam.Request{IdentityPolicies: allowAll, ResourcePolicy: b.Policy, Action: "events:PutEvents",
					Principal: role, Account: template.Account, Resource: b.Arn, Context: map[string]any{"aws:PrincipalArn": role,
						"events:source": []string{pub.Env["EVENT_SOURCE"]}, "events:detail-type": []string{"action.consumed"}}})
				return dec.Result, err
			}
			other := s.d.Stack.Functions["create"].RoleArn
			if got, err := ask(other); err != nil || got != "ExplicitlyDenied" {
				return fmt.Errorf("create's role publishing %s: %s %v (want ExplicitlyDenied by the bus policy)", pub.Env["EVENT_SOURCE"], got, err)
			}
			if got, err := ask(pub.RoleArn); err != nil || got != "Allowed" {
				return fmt.Errorf("the publisher's role: %s %v (want Allowed)", got, err)
			}
			return nil
		})
	}

	// --- tracing: a function with active tracing runs a build that sends
	// its segments (the xray build tag) to the X-Ray daemon Lambda runs.
	var traced []string
	for name, f := range s.d.Stack.Functions {
		if f.Tracing {
			traced = append(traced, name)
		}
	}
	sort.Strings(traced)
	if len(traced) > 0 {
		s.check("tracing: every function with active tracing sends X-Ray segments (a build with the xray tag)", func() error {
			var silent []string
			for _, name := range traced {
				if s.d.TraceSegments(name) == 0 {
					silent = append(silent, name)
				}
			}
			if len(silent) > 0 {
				return fmt.Errorf("TracingConfig Active, but %s sent no segment to the X-Ray daemon: code built without the xray tag records no AWS call", strings.Join(silent, ", "))
			}
			return nil
		})
	}
}

// routesCalled checks that every route of the template was called by some
// check (a new route needs a check in this file).
func (s *suite) routesCalled() {
	s.check("routes: every route of the template was called", func() error {
		hits := s.d.RouteHits()
		var missing []string
		for _, r := range s.d.Stack.Routes {
			if hits[r.RouteKey] == 0 {
				missing = append(missing, r.RouteKey+" → "+r.Function)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no check called %s (add one in e2e/checks_test.go)", strings.Join(missing, ", "))
		}
		return nil
	})
}

func queueOf(d *emulator.Deployment, url string) string {
	for _, q := range d.Stack.Queues {
		if q.URL == url {
			return q.Name
		}
	}
	return url[strings.LastIndex(url, "/")+1:]
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// ttlDeletion: DynamoDB's deletion of an unfinished action (its stream
// record's userIdentity is the DynamoDB service) is its expiry; anyone
// else's delete is not.
func (s *suite) ttlDeletion(a *caller, table string) func() error {
	return func() error {
		byTTL, byUser := s.id("ttl"), s.id("deleted")
		for _, id := range []string{byUser, byTTL} {
			if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": id, "userId": "u10"}), 201, ""); err != nil {
				return err
			}
		}
		t := tenant.Default
		if s.tenants {
			t = "acme"
		}
		out, err := s.d.DB.DeleteItem(s.ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), ReturnValues: types.ReturnValueAllOld,
			Key: map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: tenant.ItemKey(t, byUser)}}})
		if err != nil {
			return err
		}
		if len(out.Attributes) == 0 {
			return fmt.Errorf("no item %s in %s to delete", tenant.ItemKey(t, byUser), table)
		}
		if err := s.d.ExpireByTTL(s.ctx, table, tenant.ItemKey(t, byTTL)); err != nil {
			return err
		}
		if err := s.waitEvent("action.expired", byTTL); err != nil {
			return fmt.Errorf("%w\n    publisher output: %s", err, tail(s.d.Output("publisher"), 1500))
		}
		// The user's delete came first in the stream: it is handled by now.
		if ev, _ := s.event("action.expired", byUser); ev != nil {
			return fmt.Errorf("a DeleteItem that is not TTL's published action.expired for %s", byUser)
		}
		return nil
	}
}

// purge: the daily purge (a table without TTL) deletes a finished action
// once its retention has ended, with a delete whose stream record publishes
// nothing, and keeps an open action whatever its ttl says (the sweeper has
// yet to mark it expired, and its action.expired must not be lost).
func (s *suite) purge(a *caller, table string, rule template.Rule) func() error {
	return func() error {
		done, open, after := s.id("purged"), s.id("kept-open"), s.id("after-purge")
		for _, id := range []string{done, open, after} {
			if err := expect(s.call(a, "POST", "/actions", map[string]any{"actionId": id, "userId": "u11"}), 201, ""); err != nil {
				return err
			}
		}
		if err := expect(s.call(a, "POST", "/actions/"+done+"/consume", map[string]any{}), 200, ""); err != nil {
			return err
		}
		if err := s.waitEvent("action.consumed", done); err != nil {
			return err
		}
		t := tenant.Default
		if s.tenants {
			t = "acme"
		}
		past := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
		for _, id := range []string{done, open} { // their retention ended an hour ago
			if _, err := s.d.DB.UpdateItem(s.ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table),
				Key:              map[string]types.AttributeValue{"actionId": &types.AttributeValueMemberS{Value: tenant.ItemKey(t, id)}},
				UpdateExpression: aws.String("SET #t = :t"), ExpressionAttributeNames: map[string]string{"#t": "ttl"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberN{Value: past}},
				ConditionExpression:       aws.String("attribute_exists(actionId)")}); err != nil {
				return fmt.Errorf("set the ttl of %s: %w", id, err)
			}
		}
		if err := s.d.RunSchedule(s.ctx, rule); err != nil {
			return fmt.Errorf("the purge failed: %w\n    sweeper output: %s", err, tail(s.d.Output("sweeper"), 600))
		}
		if err := expect(s.call(a, "GET", "/actions/"+done, nil), 404, ""); err != nil {
			return fmt.Errorf("the finished action past its retention is still there: %w\n    sweeper output: %s", err, tail(s.d.Output("sweeper"), 600))
		}
		if err := expect(s.call(a, "GET", "/actions/"+open, nil), 200, ""); err != nil {
			return fmt.Errorf("the open action was not kept: %w", err)
		}
		// Records are read in order: once the next action's event is out,
		// the purge's delete has been handled.
		if err := expect(s.call(a, "POST", "/actions/"+after+"/consume", map[string]any{}), 200, ""); err != nil {
			return err
		}
		if err := s.waitEvent("action.consumed", after); err != nil {
			return err
		}
		for _, typ := range []string{"action.expired", "action.canceled"} {
			if ev, _ := s.event(typ, done); ev != nil {
				return fmt.Errorf("the purge's delete of %s published %s", done, typ)
			}
		}
		return nil
	}
}
