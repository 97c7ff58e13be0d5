package proxy

import (
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

func TestWithPriority(t *testing.T) {
	t.Parallel()
	c := &decide.Class{Name: "interactive", Priority: 10}
	tests := []struct{ body, want string }{
		{`{"model":"m","prompt":"x"}`, `{"priority":-10,"model":"m","prompt":"x"}`},
		{`{ }`, `{"priority":-10 }`},
		{`{"model":"m","priority":3}`, ""}, // the client's own stays
		{`[]`, ""},
	}
	for _, tt := range tests {
		if got := string(withPriority([]byte(tt.body), c)); got != tt.want {
			t.Errorf("withPriority(%s) = %q, want %q", tt.body, got, tt.want)
		}
	}
	if withPriority([]byte(`{"a":1}`), nil) != nil {
		t.Error("no class must leave the body alone")
	}
}
