package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// JWTClaims are a token's claims as API Gateway's JWT authorizer gives them
// to the function (requestContext.authorizer.jwt.claims): every value a
// string; a number as written in the token (an integer without exponent),
// an array as "[a b]" (its elements space-separated in brackets), an object
// as its JSON.
func JWTClaims(claims map[string]any) map[string]string {
	out := make(map[string]string, len(claims))
	for k, v := range claims {
		out[k] = claimString(v)
	}
	return out
}

func claimString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = claimString(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// CheckJWT is what API Gateway's JWT authorizer checks of a token's claims
// (the signature aside): iss is the issuer; aud holds one of the audiences,
// or, when the token has no aud (a Cognito access token), client_id is one;
// exp is in the future; nbf and iat, when present, are not.
func CheckJWT(claims map[string]any, issuer string, audience []string, now time.Time) error {
	if claims["iss"] != issuer {
		return fmt.Errorf("iss %v is not the issuer %s", claims["iss"], issuer)
	}
	var auds []string
	switch a := claims["aud"].(type) {
	case string:
		auds = []string{a}
	case []any:
		for _, x := range a {
			auds = append(auds, claimString(x))
		}
	case nil:
		if c, ok := claims["client_id"].(string); ok {
			auds = []string{c}
		}
	}
	if !slices.ContainsFunc(auds, func(a string) bool { return slices.Contains(audience, a) }) {
		return fmt.Errorf("neither aud nor client_id is an audience of the authorizer (%v)", audience)
	}
	exp, ok := number(claims["exp"])
	if !ok {
		return errors.New("no exp")
	}
	if !time.Unix(exp, 0).After(now) {
		return errors.New("expired")
	}
	for _, k := range []string{"nbf", "iat"} {
		if t, ok := number(claims[k]); ok && time.Unix(t, 0).After(now) {
			return fmt.Errorf("%s is in the future", k)
		}
	}
	return nil
}

func number(v any) (int64, bool) {
	switch x := v.(type) {
	case float64:
		return int64(x), true
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	}
	return 0, false
}
