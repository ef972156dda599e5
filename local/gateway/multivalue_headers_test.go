package gateway

import (
	"context"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestMultiValueHeadersAreNotSent: a payload 2.0 response is statusCode,
// headers, body, isBase64Encoded and cookies; API Gateway reads
// multiValueHeaders only from a 1.0 response and drops them from a 2.0 one
// (aws-lambda-go's APIGatewayV2HTTPResponse still has the field). Locally
// they were sent: a Retry-After set only there reached the client here and
// never in AWS, and a Content-Type set in both went out twice.
func TestMultiValueHeadersAreNotSent(t *testing.T) {
	m := New()
	m.Route("GET /actions/{actionId}", func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{
			StatusCode:        503,
			Headers:           map[string]string{"Content-Type": "application/json"},
			MultiValueHeaders: map[string][]string{"Retry-After": {"1"}, "Content-Type": {"text/plain"}},
			Cookies:           []string{"a=1", "b=2"},
			Body:              "{}",
		}, nil
	})
	w := httptest.NewRecorder()
	m.ServeHTTP(w, httptest.NewRequest("GET", "/actions/x", nil))
	if got := w.Header().Values("Retry-After"); len(got) != 0 {
		t.Errorf("Retry-After %q, set only in multiValueHeaders: API Gateway sends none", got)
	}
	if got := w.Header().Values("Content-Type"); !slices.Equal(got, []string{"application/json"}) {
		t.Errorf("Content-Type %q, want the headers' one only", got)
	}
	if got := w.Header().Values("Set-Cookie"); !slices.Equal(got, []string{"a=1", "b=2"}) {
		t.Errorf("Set-Cookie %q, want one per cookie", got)
	}
	if w.Code != 503 || w.Body.String() != "{}" {
		t.Errorf("%d %q", w.Code, w.Body.String())
	}
}
