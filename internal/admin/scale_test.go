package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestScaleHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		pools  func() any
		status int
		body   string
	}{
		{name: "off", pools: nil, status: http.StatusNotFound, body: `"error": "scaling is off`},
		{name: "on", pools: func() any { return []map[string]any{{"pool": "all", "desired": 3}} }, status: http.StatusOK,
			body: `"pool": "all"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			ScaleHandler(tt.pools).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/scale", nil))
			if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.body) ||
				rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("GET /admin/scale = %d %q (%s), want %d containing %q", rec.Code, rec.Body, rec.Header().Get("Content-Type"), tt.status, tt.body)
			}
		})
	}
}
