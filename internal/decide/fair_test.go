package decide

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
)

func TestTenant(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("Bearer acme"))
	acme := "sha256:" + hex.EncodeToString(sum[:])
	other := sha256.Sum256([]byte("Bearer other"))
	f := &Fairness{Tenants: map[string]Tenant{acme: {Name: "acme", Weight: 3}}}
	byHeader := &Fairness{TenantHeader: "X-Tenant"}
	tests := []struct {
		name       string
		f          *Fairness
		hdr        http.Header
		key        string
		wantTenant string
		wantWeight float64
	}{
		{name: "no fairness", f: nil, key: "Bearer acme", wantTenant: "", wantWeight: 0},
		{name: "named by the client key", f: f, key: "Bearer acme", wantTenant: "acme", wantWeight: 3},
		{name: "unnamed: a hash prefix, never the key", f: f, key: "Bearer other",
			wantTenant: "sha256:" + hex.EncodeToString(other[:8]), wantWeight: 1},
		{name: "no key: anonymous", f: f, key: "", wantTenant: "", wantWeight: 1},
		{name: "by header, not the key", f: byHeader, hdr: http.Header{"X-Tenant": {"Bearer acme"}}, key: "Bearer other",
			wantTenant: "sha256:" + hex.EncodeToString(sum[:8]), wantWeight: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.hdr
			if h == nil {
				h = http.Header{}
			}
			tenant, w := tt.f.tenant(h, tt.key)
			if tenant != tt.wantTenant || w != tt.wantWeight {
				t.Errorf("tenant() = %q, %v, want %q, %v", tenant, w, tt.wantTenant, tt.wantWeight)
			}
			if tenant != "" && UnnamedTenant(tenant) != (tt.wantTenant != "acme") {
				t.Errorf("UnnamedTenant(%q) = %v", tenant, UnnamedTenant(tenant))
			}
		})
	}
}

func TestService(t *testing.T) {
	t.Parallel()
	tests := []struct {
		f              *Fairness
		prompt, output int64
		want           int64
	}{
		{f: nil, prompt: 100, output: 50, want: 0},
		{f: &Fairness{}, prompt: 100, output: 50, want: 200},                                             // 1 × 100 + 2 × 50
		{f: &Fairness{InputWeight: 0.5, OutputWeight: 3}, prompt: 101, output: 10, want: 81},             // ⌈50.5 + 30⌉
		{f: &Fairness{InputWeight: 1e6, OutputWeight: 1e6}, prompt: 1 << 62, output: 1, want: 1<<63 - 1}, // saturates
		{f: &Fairness{}, prompt: -5, output: -1, want: 0},
	}
	for _, tt := range tests {
		if got := tt.f.service(tt.prompt, tt.output); got != tt.want {
			t.Errorf("%+v.service(%d, %d) = %d, want %d", tt.f, tt.prompt, tt.output, got, tt.want)
		}
	}
}
