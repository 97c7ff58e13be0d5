package traffic

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestFiller(t *testing.T) {
	for _, tokens := range []int{-1, 0, 1, 50, 4000} {
		got := Filler(tokens)
		if want := max(tokens, 0) * CharsPerToken; len(got) != want {
			t.Errorf("len(Filler(%d)) = %d, want %d", tokens, len(got), want)
		}
		if long := Filler(4000); !strings.HasPrefix(long, got) {
			t.Errorf("Filler(%d) is not a prefix of a longer filler", tokens)
		}
	}
}

func TestBodies(t *testing.T) {
	tests := []struct {
		name string
		body any
		want string
	}{
		{name: "chat answered whole", body: Chat("m", "hi", 16, false),
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":false}`},
		{name: "streamed chat asks for usage", body: Chat("m", "hi", 16, true),
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "completion", body: CompletionRequest{Model: "m", Prompt: "request 7", MaxTokens: 16, Stream: true},
			want: `{"model":"m","prompt":"request 7","max_tokens":16,"stream":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.body)
			if err != nil || string(b) != tt.want {
				t.Errorf("json.Marshal(%+v) = %s, %v; want %s", tt.body, b, err, tt.want)
			}
		})
	}
}
