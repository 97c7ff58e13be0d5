package classify

import "testing"

// TestMemoryEstimate: a request's memory per vocabulary entry is its sampled
// sequences × BytesPerLogit, plus 8 per prompt token of one chunk
// (PromptLogprobsChunk, 8192 by default) with prompt_logprobs.
func TestMemoryEstimate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, body string
		est              Estimator
		want             int64
	}{
		{"one chat sequence", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, Estimator{}, 32},
		{"n samples each", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":4}`, Estimator{}, 128},
		{"best_of counts when larger", "/v1/completions", `{"prompt":"hi","n":2,"best_of":5}`, Estimator{}, 160},
		{"a batch of prompts", "/v1/completions", `{"prompt":["a","b","c"]}`, Estimator{}, 96},
		{"policy bytes per logit", "/v1/completions", `{"prompt":"hi"}`, Estimator{BytesPerLogit: 40}, 40},
		{"prompt_logprobs adds the prompt's logits", "/v1/completions",
			`{"prompt":"` + string(make40('x')) + `","prompt_logprobs":5}`, Estimator{}, 32 + 10*promptLogprobBytes},
		{"prompt_logprobs -1 (whole vocabulary)", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"abcdefgh"}],"prompt_logprobs":-1}`, Estimator{}, 32 + 0},
		{"prompt_logprobs counts one chunk of a long prompt", "/v1/completions",
			`{"prompt":"` + string(make40('x')) + `","prompt_logprobs":0}`, Estimator{PromptLogprobsChunk: 4}, 32 + 4*promptLogprobBytes},
		{"prompt_logprobs chunk above the prompt", "/v1/completions",
			`{"prompt":"` + string(make40('x')) + `","prompt_logprobs":0}`, Estimator{PromptLogprobsChunk: 11}, 32 + 10*promptLogprobBytes},
		{"prompt_logprobs null is absent", "/v1/completions", `{"prompt":"abcd","prompt_logprobs":null}`, Estimator{}, 32},
		{"embeddings sample nothing", "/v1/embeddings", `{"input":"abcd"}`, Estimator{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(kindOf(t, tt.path), []byte(tt.body), tt.est)
			if err != nil {
				t.Fatalf("Parse(%s) error = %v", tt.body, err)
			}
			want := tt.want
			if tt.name == "prompt_logprobs -1 (whole vocabulary)" {
				want += got.PromptTokens * promptLogprobBytes // the chat template's tokens count too
				if got.PromptTokens == 0 {
					t.Fatal("PromptTokens = 0, want the message counted")
				}
			}
			if got.Memory != want {
				t.Errorf("Parse(%s).Memory = %d, want %d (%+v)", tt.body, got.Memory, want, got)
			}
		})
	}
}

func make40(c byte) []byte {
	b := make([]byte, 40)
	for i := range b {
		b[i] = c
	}
	return b
}

// TestPromptLogprobsInvalid: a prompt_logprobs that is not an integer ≥ -1
// is a 400 naming the parameter, as vLLM answers.
func TestPromptLogprobsInvalid(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"prompt":"a","prompt_logprobs":"x"}`, `{"prompt":"a","prompt_logprobs":-2}`, `{"prompt":"a","prompt_logprobs":1.5}`} {
		_, err := Parse(kindOf(t, "/v1/completions"), []byte(body), Estimator{})
		e, ok := err.(*Error)
		if !ok || e.Param != "prompt_logprobs" {
			t.Errorf("Parse(%s) error = %v, want an *Error on prompt_logprobs", body, err)
		}
	}
}
