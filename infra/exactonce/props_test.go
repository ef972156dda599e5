package exactonce

import (
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

// TestPropsValidate: a prop that would deploy something broken or useless
// is refused before anything is synthesized, naming the prop: an issuer API
// Gateway cannot discover, an audience no token carries, an event source
// EventBridge refuses, an alarm email SNS cannot subscribe, an empty tenant
// map, a subscriber tenant no event names. (Each of these synthesized
// before, and deployed.) A CDK token's value is known only at deploy
// time: it is not judged by its text.
func TestPropsValidate(t *testing.T) {
	jwt := func(issuer string, aud ...string) Props {
		return Props{Code: AssetCode(placeholders), Auth: AuthJWT, JwtIssuer: issuer, JwtAudience: aud}
	}
	tenants := map[string][]string{"coupons": {"arn:aws:iam::111122223333:role/coupon-*"}}
	for _, c := range []struct {
		name string
		p    Props
		want string // "" : valid
	}{
		{"defaults", Props{Code: AssetCode(placeholders)}, ""},
		{"jwt", jwt("https://issuer.example/tenant-1", "orders-api", "billing-api"), ""},
		{"jwt over http", jwt("http://issuer.example", "a"), "JwtIssuer must be the issuer's https URL"},
		{"jwt issuer not a URL", jwt("not a url", "a"), "JwtIssuer must be the issuer's https URL"},
		{"jwt issuer with a query", jwt("https://issuer.example/?x=1", "a"), "JwtIssuer"},
		{"jwt audience padded", jwt("https://issuer.example", "a", " billing-api"), `JwtAudience[1] is " billing-api"`},
		{"jwt audience empty", jwt("https://issuer.example", "", ""), "JwtAudience[0]"},
		{"event source", Props{Code: AssetCode(placeholders), EventSource: "shop.orders"}, ""},
		{"event source of AWS", Props{Code: AssetCode(placeholders), EventSource: "aws.exactonce"}, "EventSource"},
		{"event source too long", Props{Code: AssetCode(placeholders), EventSource: strings.Repeat("s", 257)}, "EventSource"},
		{"alarm email", Props{Code: AssetCode(placeholders), AlarmEmail: "ops@example.com"}, ""},
		{"alarm email not one", Props{Code: AssetCode(placeholders), AlarmEmail: "not-an-email"}, "AlarmEmail"},
		{"alarm email with a name", Props{Code: AssetCode(placeholders), AlarmEmail: "Ops <ops@example.com>"}, "AlarmEmail"},
		{"empty tenant map", Props{Code: AssetCode(placeholders), Tenants: map[string][]string{}}, "Tenants is empty"},
		{"subscriber tenant", Props{Code: AssetCode(placeholders), Tenants: tenants, ExampleSubscriber: true, ExampleSubscriberTenant: "coupons"}, ""},
		{"subscriber tenant unknown", Props{Code: AssetCode(placeholders), Tenants: tenants, ExampleSubscriber: true, ExampleSubscriberTenant: "nosuch"}, "not a tenant of Tenants"},
		{"subscriber tenant without a subscriber", Props{Code: AssetCode(placeholders), Tenants: tenants, ExampleSubscriberTenant: "coupons"}, "needs ExampleSubscriber"},
		// A value known only at deploy time (a parameter, a user pool's URL) is not judged by its token's text.
		{"jwt issuer from a token", jwt(*awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("https://cognito-idp."), awscdk.Aws_REGION(), jsii.String(".amazonaws.com/pool")}), "a"), ""},
		{"jwt issuer and audience tokens", jwt(*awscdk.Token_AsString(awscdk.Fn_Ref(jsii.String("Issuer")), nil), *awscdk.Token_AsString(awscdk.Fn_Ref(jsii.String("Aud")), nil)), ""},
		{"alarm email from a token", Props{Code: AssetCode(placeholders), AlarmEmail: *awscdk.Token_AsString(awscdk.Fn_Ref(jsii.String("Email")), nil)}, ""},
	} {
		err := c.p.Validate()
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
