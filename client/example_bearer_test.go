package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/exactonce/exactonce/client"
)

// Call an API deployed with JWT authorization (exactonce:auth=jwt): an
// access token from your issuer's OAuth 2.0 token endpoint (the client
// credentials grant), with the scopes of the routes this service calls. The
// client asks for a token when it has none, before its token expires, and
// once after a 401.
func ExampleWithBearerToken() {
	tokens := &http.Client{Timeout: 10 * time.Second}
	token := func(ctx context.Context) (string, time.Time, error) {
		form := url.Values{"grant_type": {"client_credentials"}, "scope": {"actions:create actions:consume"}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://login.example.com/oauth2/token", strings.NewReader(form.Encode()))
		if err != nil {
			return "", time.Time{}, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(os.Getenv("CLIENT_ID"), os.Getenv("CLIENT_SECRET"))
		resp, err := tokens.Do(req)
		if err != nil {
			return "", time.Time{}, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", time.Time{}, fmt.Errorf("token endpoint: %s", resp.Status)
		}
		var t struct {
			AccessToken string `json:"access_token"`
			ExpiresIn   int    `json:"expires_in"` // seconds; 0: not given
		}
		if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
			return "", time.Time{}, err
		}
		var expiry time.Time
		if t.ExpiresIn > 0 {
			expiry = time.Now().Add(time.Duration(t.ExpiresIn) * time.Second)
		}
		return t.AccessToken, expiry, nil
	}

	ctx := context.Background()
	c := client.New("https://abc123.execute-api.eu-west-1.amazonaws.com", client.WithBearerToken(token))
	a, err := c.Consume(ctx, "coupon-42", client.ConsumeInput{Reason: "checkout 981"})
	if err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrUnauthorized): the token was refused twice
	}
	log.Printf("consumed at %s", a.ConsumedAt)
}
