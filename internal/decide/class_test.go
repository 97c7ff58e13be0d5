package decide

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"testing"
)

func TestClassPlacement(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("Bearer batch-key"))
	cs := &Classes{Header: "X-Class", Default: "interactive", List: []Class{
		{Name: "interactive", Priority: 10},
		{Name: "batch", Priority: -10, Routes: []string{"/v1/embeddings"}, ClientKeys: []string{"sha256:" + hex.EncodeToString(sum[:])}},
		{Name: "vip", Priority: 20},
	}}
	cs.compile()
	tests := []struct {
		name, header, path, key, want string
	}{
		{name: "default", path: "/v1/completions", want: "interactive"},
		{name: "route", path: "/v1/embeddings", want: "batch"},
		{name: "client key", path: "/v1/completions", key: "Bearer batch-key", want: "batch"},
		{name: "header beats key and route", header: "vip", path: "/v1/embeddings", key: "Bearer batch-key", want: "vip"},
		{name: "unknown header value is ignored", header: "nope", path: "/v1/embeddings", want: "batch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", tt.path, nil)
			if tt.header != "" {
				r.Header.Set("X-Class", tt.header)
			}
			if got := cs.place(r.Header, tt.path, tt.key); got == nil || got.Name != tt.want {
				t.Fatalf("place(%s) = %v, want %s", tt.name, got, tt.want)
			}
		})
	}
	var none *Classes
	if none.place(httptest.NewRequest("GET", "/", nil).Header, "/", "") != nil {
		t.Fatal("no classes must place nothing")
	}
}
