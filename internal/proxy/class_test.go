package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

func TestWithPriority(t *testing.T) {
	t.Parallel()
	c := &decide.Class{Name: "interactive", Priority: 10}
	tests := []struct {
		body  string
		named bool
		want  string
	}{
		{body: `{"model":"m","prompt":"x"}`, want: `{"priority":-10,"model":"m","prompt":"x"}`},
		{body: `{ }`, want: `{"priority":-10 }`},
		{body: `{"model":"m","priority":3}`, named: true}, // the client's own stays
		{body: `[]`},
	}
	for _, tt := range tests {
		if got := string(withPriority([]byte(tt.body), c, tt.named)); got != tt.want {
			t.Errorf("withPriority(%s, named %v) = %q, want %q", tt.body, tt.named, got, tt.want)
		}
	}
	if withPriority([]byte(`{"a":1}`), nil, false) != nil {
		t.Error("no class must leave the body alone")
	}
}

// TestForwardedPriority: through the whole handler, a pod that takes the
// class's priority gets it in the body it receives, unless the client's body
// names its own, which reaches the pod byte for byte (the classifier's pass
// saw the key: no second walk of the body looks for it).
func TestForwardedPriority(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[]}`)
	})
	tp := newTestProxy(t, pod, func(o *testOptions) {
		o.Policy.Classes = &decide.Classes{Default: "interactive", List: []decide.Class{{Name: "interactive", Priority: 10}}}
		o.Policy.ForwardPriority = map[string]bool{"pod-0": true}
	})
	bodies := []struct{ sent, want string }{
		{`{"model":"m","prompt":"a"}`, `{"priority":-10,"model":"m","prompt":"a"}`},
		{`{"model":"m","prompt":"a","priority":3}`, `{"model":"m","prompt":"a","priority":3}`},
		{`{"model":"m","priorit\u0079":3,"prompt":"a"}`, `{"model":"m","priorit\u0079":3,"prompt":"a"}`},
		{`{"model":"m","prompt":"a","extra":{"priority":3}}`, `{"priority":-10,"model":"m","prompt":"a","extra":{"priority":3}}`},
	}
	for _, b := range bodies {
		res, err := http.Post(tp.srv.URL+"/v1/completions", "application/json", strings.NewReader(b.sent))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", b.sent, res.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(bodies) {
		t.Fatalf("the pod got %d bodies, want %d", len(got), len(bodies))
	}
	for i, b := range bodies {
		if got[i] != b.want {
			t.Errorf("sent %s: the pod got %s, want %s", b.sent, got[i], b.want)
		}
	}
}
