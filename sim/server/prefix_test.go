package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// TestSharedSystemPromptHits sends two chat requests with the same
// 2 000-character system prompt and different user messages: the second
// finds the blocks of the system prompt (and of the user message's
// template tokens) cached, 31 blocks of 16 tokens.
func TestSharedSystemPromptHits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, sim.Settings{}, Settings{})
		system := strings.Repeat("You are a careful assistant. ", 69)[:2000]
		prompts := 0
		for _, user := range []string{"What is a KV cache?", "Why do GPUs run out of memory?"} {
			body, _ := json.Marshal(map[string]any{"max_tokens": 2, "messages": []map[string]string{
				{"role": "system", "content": system}, {"role": "user", "content": user}}})
			rec := do(srv, http.MethodPost, "/v1/chat/completions", string(body))
			var resp response
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || rec.Code != 200 {
				t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
			}
			prompts += resp.Usage.PromptTokens
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(do(srv, http.MethodGet, "/metrics", "").Body)
		if err != nil {
			t.Fatalf("/metrics does not parse: %v", err)
		}
		got := func(name string) float64 {
			f := fams[name]
			if f == nil || f.GetHelp() == "" || len(f.Metric) != 1 {
				t.Fatalf("/metrics lacks %s with HELP", name)
			}
			return f.Metric[0].GetCounter().GetValue()
		}
		if q, h := got("vllm:prefix_cache_queries_total"), got("vllm:prefix_cache_hits_total"); q != float64(prompts) || h != 31*16 {
			t.Fatalf("prefix cache queries %v, hits %v; want %d, %d", q, h, prompts, 31*16)
		}
	})
}

func TestBlockHashes(t *testing.T) {
	text := []byte(strings.Repeat("abcd", 100)) // 400 bytes: 6 chunks of 64 and a rest
	tests := []struct {
		name    string
		content []byte
		unit    int
		prompt  int
		want    int
	}{
		{"full chunks only", text, 4, 100, 6},
		{"capped by the prompt's full blocks", text, 4, 40, 2},
		{"shorter than a block", text[:63], 4, 16, 0},
		{"token ids, 4 bytes each", appendIDs(nil, make([]int, 40)), 4, 40, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := blockHashes(tt.content, tt.unit, 16, tt.prompt); len(got) != tt.want {
				t.Fatalf("blockHashes() = %d hashes, want %d", len(got), tt.want)
			}
		})
	}
	a := blockHashes(text, 4, 16, 100)
	b := blockHashes(append([]byte("x"), text[1:]...), 4, 16, 100)
	for i := range a {
		if a[i] == b[i] {
			t.Fatalf("block %d shared after a difference in block 0", i)
		}
	}
}
