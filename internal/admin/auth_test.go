package admin

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

func TestRequireToken(t *testing.T) {
	t.Parallel()
	var token atomic.Pointer[string]
	h := RequireToken(func() string { return *token.Load() })(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	tests := []struct {
		token, auth string
		want        int
	}{
		{"", "", 200}, // no token configured: open
		{"", "Bearer anything", 200},
		{"s3cret", "", 401},
		{"s3cret", "Bearer wrong", 401},
		{"s3cret", "Bearer s3cret2", 401},
		{"s3cret", "Basic czNjcmV0", 401},
		{"s3cret", "bearer s3cret", 401}, // the scheme is matched as written
		{"s3cret", "Bearer s3cret", 200},
		{"n3w", "Bearer s3cret", 401}, // read per request: a reload changes it at once
		{"n3w", "Bearer n3w", 200},
	}
	for _, tt := range tests {
		token.Store(&tt.token)
		req := httptest.NewRequest(http.MethodGet, "/admin/state", nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Errorf("token %q, Authorization %q: status %d, want %d", tt.token, tt.auth, rec.Code, tt.want)
		}
		challenge := rec.Header().Get("WWW-Authenticate")
		if (tt.want == 401) != (challenge == `Bearer realm="gatekeeper-admin"`) {
			t.Errorf("token %q, Authorization %q: WWW-Authenticate %q", tt.token, tt.auth, challenge)
		}
	}
}
