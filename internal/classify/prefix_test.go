package classify

import (
	"strings"
	"testing"
)

func TestPromptText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		kind  Kind
		body  string
		limit int
		want  string
	}{
		{"chat", KindChat, `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"content":"Hi","role":"user"}]}`, 100,
			"system\nBe brief.\nuser\nHi\n"},
		{"chat after other keys", KindChat, `{"tools":[{"a":"}"}],"messages":[{"role":"user","content":"x"}],"n":2}`, 100, "user\nx\n"},
		{"chat parts", KindChat, `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"text":"b","type":"text"}]}]}`, 100,
			"user\nab\n"},
		{"media ends the text", KindChat,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"http://x"}},{"type":"text","text":"after"}]},{"role":"user","content":"later"}]}`,
			100, "user\nsee"},
		{"null content", KindChat, `{"messages":[{"role":"assistant","content":null,"tool_calls":[]},{"role":"user","content":"q"}]}`, 100,
			"assistant\n\nuser\nq\n"},
		{"escapes", KindChat, `{"messages":[{"role":"user","content":"a\n\u00e9\ud83d\ude00\"b"}]}`, 100, "user\na\né😀\"b\n"},
		{"limit", KindChat, `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 50) + `"}]}`, 10, "user\nxxxxx"},
		{"limit inside an escape", KindChat, `{"messages":[{"role":"user","content":"\u00e9\u00e9\u00e9"}]}`, 7, "user\né"},
		{"completion string", KindCompletion, `{"prompt":"Once upon","model":"m"}`, 100, "Once upon"},
		{"completion list", KindCompletion, `{"prompt":["first","second"]}`, 100, "first"},
		{"token ids", KindCompletion, `{"prompt":[1, 258]}`, 100, "\x01\x00\x00\x00\x02\x01\x00\x00"},
		{"token id lists", KindCompletion, `{"prompt":[[7],[8]]}`, 100, "\x07\x00\x00\x00"},
		{"embeddings", KindEmbedding, `{"input":"x"}`, 100, ""},
		{"no prompt", KindChat, `{"model":"m"}`, 100, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Parse(tt.kind, []byte(tt.body), Estimator{}); err != nil && tt.name != "no prompt" {
				t.Fatalf("Parse: %v", err)
			}
			if got := string(PromptText(tt.kind, []byte(tt.body), nil, tt.limit)); got != tt.want {
				t.Errorf("PromptText(%s) = %q, want %q", tt.body, got, tt.want)
			}
		})
	}
}

func TestPromptTextAllocatesNothing(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat("You are helpful. ", 600) +
		`"},{"role":"user","content":"Hi \u00e9"}]}`)
	var buf [8192 + 8]byte
	if n := testing.AllocsPerRun(100, func() { PromptText(KindChat, body, buf[:0], 8192) }); n != 0 {
		t.Errorf("PromptText allocates %v times, want 0", n)
	}
}
