package httpapi

import (
	"slices"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/exactonce/exactonce/shared/tenant"
)

// Scopes a JWT caller needs, per route (API Gateway checks them on the
// route; the handler checks again, so a misconfigured route still refuses).
var routeScopes = map[string]string{
	RouteCreate: "actions:create", RouteGet: "actions:read",
	RouteConsume: "actions:consume", RouteCancel: "actions:cancel",
	RouteKeyClaim: "keys", RouteKeyComplete: "keys", RouteKeyRelease: "keys", RouteKeyGet: "keys",
	RouteUserList: "actions:read", RouteUserCancel: "actions:cancel",
	RouteUseRelease: "actions:consume", RouteUseList: "actions:read",
}

// RouteScope is the JWT scope a route needs.
func RouteScope(route string) string { return routeScopes[route] }

// DefaultTenantClaim is the JWT claim a caller is mapped to a tenant by.
const DefaultTenantClaim = "sub"

// errForbidden: the caller is in no tenant, or lacks the route's scope.
type errForbidden struct{ why string }

func (e *errForbidden) Error() string { return e.why }

// tenantOf finds the caller's tenant from what API Gateway authenticated:
// the IAM principal (an assumed role also by its role's ARN and name) or a
// claim of the JWT, matched against the tenant map. A JWT caller also needs
// the route's scope.
func (a *API) tenantOf(route string, ev *events.APIGatewayV2HTTPRequest) (string, error) {
	var names []string
	if az := ev.RequestContext.Authorizer; az != nil {
		if az.IAM != nil && az.IAM.UserARN != "" {
			names = tenant.IAMPrincipals(az.IAM.UserARN)
		}
		if jwt := az.JWT; jwt != nil {
			if err := needScope(ev, routeScopes[route]); err != nil {
				return "", err
			}
			claim := a.TenantClaim
			if claim == "" {
				claim = DefaultTenantClaim
			}
			names = append(names, jwt.Claims[claim])
		}
	}
	t, ok := a.Tenants.Resolve(names...)
	if !ok {
		return "", &errForbidden{"the caller is in no tenant"}
	}
	return t, nil
}

// needScope refuses a JWT caller whose token lacks scope: the route's, or
// another's whose work the request also does (a create that supersedes
// cancels).
func needScope(ev *events.APIGatewayV2HTTPRequest, scope string) error {
	if az := ev.RequestContext.Authorizer; az != nil && az.JWT != nil && !slices.Contains(jwtScopes(az.JWT), scope) {
		return &errForbidden{"the token lacks the scope " + scope}
	}
	return nil
}

// jwtScopes are the token's scopes: API Gateway's list, or the "scope"
// (space-separated) or "scp" claim.
func jwtScopes(jwt *events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription) []string {
	if len(jwt.Scopes) > 0 {
		return jwt.Scopes
	}
	s := jwt.Claims["scope"]
	if s == "" {
		s = jwt.Claims["scp"]
	}
	return strings.Fields(strings.Trim(s, "[]"))
}
