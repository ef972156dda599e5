package exactonce

import (
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// TestNag: cdk-nag's AwsSolutions pack reports no error (suppressions carry
// their reasons in stack.go).
func TestNag(t *testing.T) {
	for _, s := range []Props{{}, {AlarmEmail: "ops@example.com", ExampleSubscriber: true}, {Auth: AuthJWT, JwtIssuer: "https://i.example", JwtAudience: []string{"a"}}, {Tracing: true, ExampleSubscriber: true}} {
		stack, _ := synth(t, s)
		must(t, func() {
			ann := assertions.Annotations_FromStack(stack)
			errs := ann.FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*")))
			for _, e := range *errs {
				t.Errorf("nag error at %s: %v", *e.Id, e.Entry.Data)
			}
		})
	}
}
