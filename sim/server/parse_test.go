package server

import (
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"prompt":"Once upon a time","max_tokens":8}`,
		`{"prompt":["a","bc"]}`,
		`{"prompt":[1,2,3],"max_completion_tokens":2}`,
		`{"prompt":[[1,2],[3]]}`,
		`{"messages":[{"role":"user","content":"hi"}],"stream":true,"top_p":0.5}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"logprobs":true}`,
		`{"max_tokens":0,"prompt":"x"}`,
		`{nope`,
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	e, err := sim.New(sim.Settings{})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := New(e, Settings{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		_, prompt, maxTokens, status, msg := srv.parse(body, chat)
		if status == 0 && (prompt < 1 || maxTokens < 1) {
			t.Fatalf("accepted %q with prompt %d, max tokens %d", body, prompt, maxTokens)
		}
		if status != 0 && msg == "" {
			t.Fatalf("refused %q without a message", body)
		}
	})
}

// TestParsePromptLogprobs: vLLM's prompt_logprobs reaches the engine's
// request; null leaves it off.
func TestParsePromptLogprobs(t *testing.T) {
	e, err := sim.New(sim.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(e, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]bool{
		`{"prompt":"x","prompt_logprobs":0}`:    true,
		`{"prompt":"x","prompt_logprobs":null}`: false,
		`{"prompt":"x"}`:                        false,
	} {
		req, _, _, status, msg := srv.parse([]byte(body), false)
		if status != 0 || (req.PromptLogprobs != nil) != want {
			t.Errorf("parse(%s) = prompt_logprobs %v, status %d %q; want set %v", body, req.PromptLogprobs, status, msg, want)
		}
	}
}
