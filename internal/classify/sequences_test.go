package classify

import (
	"math"
	"testing"
)

// TestSequences: vLLM runs prompts × max(n, best_of) sequences, and its
// max_num_seqs counts them; the window's slots do the same.
func TestSequences(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, body string
		want             int
	}{
		{"one chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, 1},
		{"n", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":8}`, 8},
		{"best_of when larger", "/v1/completions", `{"prompt":"hi","n":2,"best_of":5}`, 5},
		{"prompts × n", "/v1/completions", `{"prompt":["a","b","c"],"n":2}`, 6},
		{"an embedding batch", "/v1/embeddings", `{"input":["a","b"]}`, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(kindOf(t, tt.path), []byte(tt.body), Estimator{})
			if err != nil {
				t.Fatalf("Parse(%s) error = %v", tt.body, err)
			}
			if s := got.Sequences(); s != tt.want {
				t.Errorf("Parse(%s).Sequences() = %d, want %d (%+v)", tt.body, s, tt.want, got)
			}
		})
	}
	for _, c := range []Request{{}, {Prompts: -1, N: 0}, {Prompts: math.MaxInt32, N: 4}} {
		want := 1
		if c.Prompts > 1 {
			want = math.MaxInt32
		}
		if s := c.Sequences(); s != want {
			t.Errorf("%+v.Sequences() = %d, want %d", c, s, want)
		}
	}
}
