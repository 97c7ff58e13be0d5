package decide

import (
	"strings"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
)

// BenchmarkDecidePrefix is Decide and Finish over the real queue with the
// pod scorer, for a chat with a 2,000-character system prompt: one pod
// computes no prefix blocks, two pods compute them (PromptText and
// route.Blocks) and score both windows.
func BenchmarkDecidePrefix(b *testing.B) {
	body := `{"model":"m","max_tokens":64,"messages":[{"role":"system","content":"` + strings.Repeat("You are a helpful assistant. ", 70) +
		`"},{"role":"user","content":"` + strings.Repeat("hello ", 100) + `"}]}`
	for _, tt := range []struct {
		name string
		pods []string
	}{{"one pod", []string{"a"}}, {"two pods", []string{"a", "b"}}} {
		b.Run(tt.name, func(b *testing.B) {
			r := newScoredRig(b, tt.pods...)
			in := chat(body, nil)
			b.ReportAllocs()
			for b.Loop() {
				req := new(Request)
				res := r.core.Decide(b.Context(), req, in)
				if res.Admitted == nil {
					b.Fatalf("not admitted: %+v", res.Refusal)
				}
				res.Admitted.Done(pods.Success)
				res.Admitted.Slot.Release()
			}
		})
	}
}
