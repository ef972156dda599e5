package exactonce

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestRoutesAuth(t *testing.T) {
	_, tmpl := synth(t, Props{})
	routes := resources(tmpl, "AWS::ApiGatewayV2::Route")
	var keys []string
	for _, r := range routes {
		keys = append(keys, props(r)["RouteKey"].(string))
		if props(r)["AuthorizationType"] != "AWS_IAM" {
			t.Errorf("route %v: authorization %v", props(r)["RouteKey"], props(r)["AuthorizationType"])
		}
	}
	sort.Strings(keys)
	want := []string{"GET /actions/{actionId}", "GET /actions/{actionId}/uses", "GET /keys/{key}", "GET /users/{userId}/actions", "POST /actions", "POST /actions/{actionId}/cancel", "POST /actions/{actionId}/consume",
		"POST /actions/{actionId}/uses/{useId}/release", "POST /keys/{key}/claim", "POST /keys/{key}/complete", "POST /keys/{key}/release", "POST /users/{userId}/actions/cancel"}
	if !slices.Equal(keys, want) {
		t.Fatalf("routes %v, want %v", keys, want)
	}
	for _, st := range resources(tmpl, "AWS::ApiGatewayV2::Stage") {
		p := props(st)
		if !strings.Contains(jsonOf(p["AccessLogSettings"]), `\"requestId\":\"$context.requestId\"`) {
			t.Errorf("access log format: %s", jsonOf(p["AccessLogSettings"]))
		}
		if jsonOf(p["DefaultRouteSettings"]) != `{"ThrottlingBurstLimit":2000,"ThrottlingRateLimit":1000}` {
			t.Errorf("throttling: %s", jsonOf(p["DefaultRouteSettings"]))
		}
	}

	_, tmpl = synth(t, Props{Auth: AuthJWT, JwtIssuer: "https://issuer.example", JwtAudience: []string{"exactonce"}})
	scopes := map[string]string{
		"POST /actions": "actions:create", "GET /actions/{actionId}": "actions:read",
		"POST /actions/{actionId}/consume": "actions:consume", "POST /actions/{actionId}/cancel": "actions:cancel",
		"POST /keys/{key}/claim": "keys", "POST /keys/{key}/complete": "keys", "POST /keys/{key}/release": "keys", "GET /keys/{key}": "keys",
		"GET /users/{userId}/actions": "actions:read", "POST /users/{userId}/actions/cancel": "actions:cancel",
		"POST /actions/{actionId}/uses/{useId}/release": "actions:consume", "GET /actions/{actionId}/uses": "actions:read",
	}
	for _, r := range resources(tmpl, "AWS::ApiGatewayV2::Route") {
		key := props(r)["RouteKey"].(string)
		if props(r)["AuthorizationType"] != "JWT" {
			t.Errorf("jwt route %v: %v", key, props(r)["AuthorizationType"])
		}
		if got := jsonOf(props(r)["AuthorizationScopes"]); got != `["`+scopes[key]+`"]` {
			t.Errorf("jwt route %s: scopes %s, want [%s]", key, got, scopes[key])
		}
	}
	auths := resources(tmpl, "AWS::ApiGatewayV2::Authorizer")
	if len(auths) != 1 || !strings.Contains(jsonOf(auths), `"Issuer":"https://issuer.example"`) || !strings.Contains(jsonOf(auths), `"Audience":["exactonce"]`) {
		t.Errorf("jwt authorizer: %s", jsonOf(auths))
	}
}

// TestTenantsContext: the tenant map and claim reach every API function
// (and only them); the example subscriber's rule can take one tenant.
func TestTenantsContext(t *testing.T) {
	const m = `{"coupons":["arn:aws:iam::111122223333:role/coupon-*"]}`
	_, tmpl := synth(t, Props{Tenants: map[string][]string{"coupons": {"arn:aws:iam::111122223333:role/coupon-*"}}, TenantClaim: "client_id", ExampleSubscriber: true, ExampleSubscriberTenant: "coupons"})
	n := 0
	for id, f := range resources(tmpl, "AWS::Lambda::Function") {
		vars, _ := props(f)["Environment"].(map[string]any)["Variables"].(map[string]any)
		api := false
		for _, r := range Routes {
			api = api || strings.HasPrefix(id, title(r.Function)+"Function")
		}
		// The map itself is in an SSM parameter (TestTenantMapOutOfTheEnvironment):
		// the functions get its name and the map's digest.
		sum := sha256.Sum256([]byte(m))
		_, named := vars["EXACTONCE_TENANTS_PARAMETER"]
		if api != (vars["EXACTONCE_TENANTS_SHA256"] == hex.EncodeToString(sum[:])) || api != named || api != (vars["EXACTONCE_TENANT_CLAIM"] == "client_id") {
			t.Errorf("%s: tenants %v (sha256 %v) claim %v", id, vars["EXACTONCE_TENANTS_PARAMETER"], vars["EXACTONCE_TENANTS_SHA256"], vars["EXACTONCE_TENANT_CLAIM"])
		}
		if api {
			n++
		}
	}
	if n != len(Routes) {
		t.Fatalf("%d API functions carry the map, want %d", n, len(Routes))
	}
	for id, r := range resources(tmpl, "AWS::Events::Rule") {
		if strings.HasPrefix(id, "AuditRule") && !strings.Contains(jsonOf(props(r)["EventPattern"]), `"detail":{"tenant":["coupons"]}`) {
			t.Errorf("subscriber rule: %s", jsonOf(props(r)["EventPattern"]))
		}
	}
}
