package exactonce

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsssm"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/exactonce/exactonce/shared/config"
	"github.com/exactonce/exactonce/shared/httpapi"
	"github.com/exactonce/exactonce/shared/store"
)

// Route is an HTTP route served by one function.
type Route struct {
	Function string
	Method   awsapigatewayv2.HttpMethod
	Path     string
	// Table actions the function calls; nothing else on the table is allowed.
	TableActions []string
	// Secret reports whether the function reads the server secret.
	Secret bool
	// KeysOnly confines the function to idempotency-key items (partition
	// keys starting with store.KeyPrefix) with the dynamodb:LeadingKeys
	// condition: the /keys functions cannot read or write an action.
	KeysOnly bool
	// UserIndex lets the function Query the user index (store.UserIndex),
	// and nothing else of it.
	UserIndex bool
}

// Routes are the API's routes: one function each, least privilege each.
var Routes = []Route{
	// create reads the user index and the user's items only to supersede.
	{"create", awsapigatewayv2.HttpMethod_POST, "/actions", []string{"dynamodb:UpdateItem", "dynamodb:BatchGetItem"}, true, false, true},
	{"get", awsapigatewayv2.HttpMethod_GET, "/actions/{actionId}", []string{"dynamodb:GetItem"}, false, false, false},
	{"consume", awsapigatewayv2.HttpMethod_POST, "/actions/{actionId}/consume", []string{"dynamodb:UpdateItem"}, true, false, false},
	{"cancel", awsapigatewayv2.HttpMethod_POST, "/actions/{actionId}/cancel", []string{"dynamodb:UpdateItem"}, true, false, false},
	{"keyclaim", awsapigatewayv2.HttpMethod_POST, "/keys/{key}/claim", []string{"dynamodb:UpdateItem"}, true, true, false},
	{"keycomplete", awsapigatewayv2.HttpMethod_POST, "/keys/{key}/complete", []string{"dynamodb:UpdateItem"}, true, true, false},
	{"keyrelease", awsapigatewayv2.HttpMethod_POST, "/keys/{key}/release", []string{"dynamodb:UpdateItem"}, true, true, false},
	{"keyget", awsapigatewayv2.HttpMethod_GET, "/keys/{key}", []string{"dynamodb:GetItem"}, true, true, false},
	// The list function may Query the user index and read items, nothing else.
	{"userlist", awsapigatewayv2.HttpMethod_GET, "/users/{userId}/actions", []string{"dynamodb:BatchGetItem"}, false, false, true},
	{"usercancel", awsapigatewayv2.HttpMethod_POST, "/users/{userId}/actions/cancel", []string{"dynamodb:BatchGetItem", "dynamodb:UpdateItem"}, true, false, true},
	// Multi-use actions: a release is one conditional write (the secret
	// keys its Idempotency-Key digest and fingerprint); the list reads the
	// item (never a body, PIN or payload: no secret).
	{"userelease", awsapigatewayv2.HttpMethod_POST, "/actions/{actionId}/uses/{useId}/release", []string{"dynamodb:UpdateItem"}, true, false, false},
	{"uselist", awsapigatewayv2.HttpMethod_GET, "/actions/{actionId}/uses", []string{"dynamodb:GetItem"}, false, false, false},
}

// Api is the HTTP API (IAM or JWT on every route), its access logs and
// throttling, and one Function per route with exactly the table actions
// (and the secret) that route needs.
type Api struct {
	constructs.Construct
	Api        awsapigatewayv2.HttpApi
	AccessLogs awslogs.LogGroup
	// Functions in Routes order; Routes by function name.
	Functions []*Function
	Routes    map[string]awsapigatewayv2.HttpRoute
	auth      Auth
}

func newApi(b *build, scope constructs.Construct, table awsdynamodb.ITable, secret secretRef) *Api {
	a := &Api{Construct: b.part(scope, "Api", false), Routes: map[string]awsapigatewayv2.HttpRoute{}, auth: b.Auth}

	// IAM (SigV4) on every route unless JWT is chosen.
	var authorizer awsapigatewayv2.IHttpRouteAuthorizer = awsapigatewayv2authorizers.NewHttpIamAuthorizer()
	if b.Auth == AuthJWT {
		authorizer = awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("Jwt"), jsii.String(b.JwtIssuer),
			&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{JwtAudience: jsii.Strings(b.JwtAudience...)})
	}
	a.Api = awsapigatewayv2.NewHttpApi(a.Construct, jsii.String("Api"), &awsapigatewayv2.HttpApiProps{
		Description:       jsii.String("ExactOnce actions API"),
		DefaultAuthorizer: authorizer,
	})
	a.AccessLogs = awslogs.NewLogGroup(a.Construct, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention: logRetention, RemovalPolicy: b.removal,
	})
	stage := a.Api.DefaultStage().Node().DefaultChild().(awsapigatewayv2.CfnStage)
	stage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: a.AccessLogs.LogGroupArn(),
		Format: jsii.String(`{"requestId":"$context.requestId","ip":"$context.identity.sourceIp","caller":"$context.identity.caller",` +
			`"requestTime":"$context.requestTime","routeKey":"$context.routeKey","status":"$context.status",` +
			`"latencyMs":"$context.responseLatency","integrationLatencyMs":"$context.integrationLatency",` +
			`"integrationError":"$context.integrationErrorMessage","responseLength":"$context.responseLength"}`),
	})
	stage.SetDefaultRouteSettings(&awsapigatewayv2.CfnStage_RouteSettingsProperty{
		ThrottlingRateLimit:  jsii.Number(1000),
		ThrottlingBurstLimit: jsii.Number(2000),
	})

	// The tenant map is read at cold start from an SSM parameter, not the
	// environment: Lambda's 4 KB of variables would hold ~35 tenants. Its
	// digest in the environment makes a change of the map update every
	// function (new cold starts read the new map).
	var tenants awsssm.StringParameter
	var tenantsSum string
	if b.Tenants != nil {
		tenants = awsssm.NewStringParameter(a.Construct, jsii.String("Tenants"), &awsssm.StringParameterProps{
			Description: jsii.String("ExactOnce tenant map (tenant → principal patterns), read by the API functions at cold start"),
			StringValue: jsii.String(b.tenantsJSON()),
			Tier:        awsssm.ParameterTier_INTELLIGENT_TIERING, // advanced (8 KB) only when the map outgrows 4 KB
		})
		sum := sha256.Sum256([]byte(b.tenantsJSON()))
		tenantsSum = hex.EncodeToString(sum[:])
	}
	for _, r := range Routes {
		env := b.tableEnv(table)
		if r.Secret {
			env["EXACTONCE_SECRET_ARN"] = secret.id
		}
		if tenants != nil {
			env[config.EnvTenantsParameter] = tenants.ParameterName()
			env[config.EnvTenantsSHA256] = jsii.String(tenantsSum)
		}
		if b.TenantClaim != "" {
			env[config.EnvJWTClaim] = jsii.String(b.TenantClaim)
		}
		fn := newFunction(b, a.Construct, r.Function, env, apiMemoryMB, apiTimeout)
		tableAccess := &awsiam.PolicyStatementProps{
			Actions:   jsii.Strings(r.TableActions...),
			Resources: &[]*string{table.TableArn()},
		}
		if r.KeysOnly {
			tableAccess.Conditions = &map[string]any{
				"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": []string{store.KeyPrefix + "*"}},
			}
		}
		fn.Function.AddToRolePolicy(awsiam.NewPolicyStatement(tableAccess))
		if r.UserIndex {
			fn.allow([]string{"dynamodb:Query"}, jsii.String(*table.TableArn()+"/index/"+store.UserIndex))
		}
		if r.Secret {
			fn.allow([]string{"secretsmanager:GetSecretValue"}, secret.policyArn)
		}
		if tenants != nil {
			fn.allow([]string{"ssm:GetParameter"}, tenants.ParameterArn())
		}
		route := &awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{r.Method},
			Integration: awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(title(r.Function)+"Integration"), fn.Function, nil),
		}
		if b.Auth == AuthJWT { // each route needs its own scope (the handler checks it too)
			route.AuthorizationScopes = jsii.Strings(httpapi.RouteScope(string(r.Method) + " " + r.Path))
		}
		a.Routes[r.Function] = (*a.Api.AddRoutes(route))[0]
		a.Functions = append(a.Functions, fn)
	}
	return a
}
