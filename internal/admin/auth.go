package admin

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// RequireToken returns middleware for the admin listener that, while token
// returns a non-empty string, answers 401 with a WWW-Authenticate challenge
// to every request without "Authorization: Bearer TOKEN". token is called
// per request, so a reload that changes it takes effect at once; "" means
// no token is required. The comparison takes constant time.
func RequireToken(token func() string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			want := token()
			if want == "" {
				next.ServeHTTP(w, r)
				return
			}
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="gatekeeper-admin"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
