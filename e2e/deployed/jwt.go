package deployed

import (
	"encoding/base64"
	"fmt"
	"time"
)

func base64URL(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

// validJWT checks what API Gateway's JWT authorizer checks of the claims:
// the issuer, an audience of the authorizer's, and the expiry. (The token's
// signature is not verified here: the issuer's keys are not on this machine.)
func validJWT(claims map[string]any, issuer string, audience []string) bool {
	if claims["iss"] != issuer {
		return false
	}
	var auds []string
	switch a := claims["aud"].(type) {
	case string:
		auds = []string{a}
	case []any:
		for _, x := range a {
			auds = append(auds, fmt.Sprint(x))
		}
	}
	if !anyIn(auds, audience) {
		return false
	}
	exp, ok := claims["exp"].(float64)
	return ok && time.Unix(int64(exp), 0).After(time.Now())
}
