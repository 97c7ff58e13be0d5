package classify

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testEstimator keeps the arithmetic of the tables easy to follow.
var testEstimator = Estimator{CharsPerToken: 4, DefaultMaxTokens: 100, mediaTokens: 500}

// testRoutes mirrors proxy's allow-list, in its order: the tables name a
// route by its path, and FuzzClassify's corpus selects one by its index.
var testRoutes = [...]struct {
	path string
	kind Kind
}{
	{"/v1/models", KindModels},
	{"/v1/completions", KindCompletion},
	{"/v1/chat/completions", KindChat},
	{"/v1/responses", KindResponses},
	{"/v1/embeddings", KindEmbedding},
	{"/v1/score", KindScore},
	{"/v1/rerank", KindScore},
	{"/v2/rerank", KindScore},
	{"/v1/audio/transcriptions", KindAudio},
	{"/v1/audio/translations", KindAudio},
}

// kindOf returns the kind of the route at path.
func kindOf(t testing.TB, path string) Kind {
	t.Helper()
	for _, rt := range testRoutes {
		if rt.path == path {
			return rt.kind
		}
	}
	t.Fatalf("no route %q", path)
	return 0
}

// classifyCase is one accepted body and what classification must learn.
type classifyCase struct {
	name, path, body string
	want             Request
}

var classifyCases = []classifyCase{
	// Completions: the four prompt shapes.
	{"completion string", "/v1/completions", `{"model":"m","prompt":"Once upon a time","max_tokens":8}`,
		Request{Model: "m", Prompts: 1, PromptTokens: 4, MaxTokens: 8, N: 1, Estimated: 12}},
	{"completion strings batch", "/v1/completions", `{"prompt":["abcd","abcdefgh",""],"max_tokens":10}`,
		Request{Prompts: 3, PromptTokens: 3, MaxTokens: 10, N: 1, Estimated: 33}},
	{"completion batch rounds each prompt up", "/v1/completions", `{"prompt":["a","b","c","d"],"max_tokens":1}`,
		Request{Prompts: 4, PromptTokens: 4, MaxTokens: 1, N: 1, Estimated: 8}},
	{"completion token ids", "/v1/completions", `{"prompt":[1,2,3,4,5],"max_tokens":5}`,
		Request{Prompts: 1, PromptTokens: 5, MaxTokens: 5, N: 1, Estimated: 10}},
	{"completion token id lists", "/v1/completions", `{"prompt":[[1,2],[3]]}`,
		Request{Prompts: 2, PromptTokens: 3, MaxTokens: 100, DefaultMax: true, N: 1, Estimated: 203}},
	{"completion n and best_of", "/v1/completions", `{"prompt":"abcd","max_tokens":4,"n":2,"best_of":3}`,
		Request{Prompts: 1, PromptTokens: 1, MaxTokens: 4, N: 3, Estimated: 15}},
	{"completion n larger", "/v1/completions", `{"prompt":"abcd","max_tokens":4,"n":5,"best_of":null}`,
		Request{Prompts: 1, PromptTokens: 1, MaxTokens: 4, N: 5, Estimated: 25}},
	{"completion stream", "/v1/completions", `{"prompt":"abcd","stream":true,"stream_options":{"include_usage":true}}`,
		Request{Stream: true, Prompts: 1, PromptTokens: 1, MaxTokens: 100, DefaultMax: true, N: 1, Estimated: 101}},
	{"completion escapes count decoded bytes", "/v1/completions", `{"prompt":"\u00e9\u00e9\u00e9\u00e9\n","max_tokens":0}`,
		Request{Prompts: 1, PromptTokens: 3, N: 1, Estimated: 3}},
	{"completion max_tokens zero", "/v1/completions", `{"prompt":"","max_tokens":0,"echo":true}`,
		Request{Prompts: 1, N: 1, Estimated: 1}},
	{"completion nulls", "/v1/completions", `{"model":null,"prompt":"abcd","max_tokens":null,"n":null,"stream":null}`,
		Request{Prompts: 1, PromptTokens: 1, MaxTokens: 100, DefaultMax: true, N: 1, Estimated: 101}},
	{"completion prompt_embeds", "/v1/completions", `{"prompt":null,"prompt_embeds":"` + strings.Repeat("A", 40) + `","max_tokens":2}`,
		Request{Prompts: 1, PromptTokens: 10, MaxTokens: 2, N: 1, Estimated: 12}},
	{"completion escaped model and key", "/v1/completions", `{"m\u006fdel":"m\u00e9","pr\u006fmpt":"abcd","max_t\u006fkens":3}`,
		Request{Model: "mé", Prompts: 1, PromptTokens: 1, MaxTokens: 3, N: 1, Estimated: 4}},
	{"completion ignores chat fields", "/v1/completions", `{"prompt":"abcd","max_tokens":1,"messages":"x","max_completion_tokens":"x","temperature":0.7}`,
		Request{Prompts: 1, PromptTokens: 1, MaxTokens: 1, N: 1, Estimated: 2}},
	{"completion huge max_tokens saturates", "/v1/completions", `{"prompt":"abcd","max_tokens":9223372036854775807,"n":2}`,
		Request{Prompts: 1, PromptTokens: 1, MaxTokens: math.MaxInt64, N: 2, Estimated: math.MaxInt64}},

	// Chat.
	{"chat fixture request", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hello there, how are you?"}],"max_tokens":12}`,
		Request{Prompts: 1, PromptTokens: 8, MaxTokens: 12, N: 1, Estimated: 20}}, // "user" + 25 bytes = 29 → 8
	{"chat text parts", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"abcdefgh"},{"type":"text","text":"ab"}]}],"max_tokens":1}`,
		Request{Model: "m", Prompts: 1, PromptTokens: 4, MaxTokens: 1, N: 1, Estimated: 5}}, // 4+8+2 = 14 → 4
	{"chat image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("A", 4000) + `"}}]}],"max_tokens":10}`,
		Request{Prompts: 1, PromptTokens: 504, MaxTokens: 10, N: 1, media: 1, Estimated: 514}}, // 16 bytes → 4, + 500
	{"chat audio and video parts", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}},{"type":"video_url","video_url":{"url":"https://x/v.mp4"}}]}],"max_tokens":10}`,
		Request{Prompts: 1, PromptTokens: 1001, MaxTokens: 10, N: 1, media: 2, Estimated: 1011}},
	{"chat untyped media part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"image_url":"https://x/a.png"}]}],"max_tokens":10}`,
		Request{Prompts: 1, PromptTokens: 501, MaxTokens: 10, N: 1, media: 1, Estimated: 511}},
	{"chat null content with tool calls", "/v1/chat/completions", `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}],"max_completion_tokens":5}`,
		Request{Prompts: 1, PromptTokens: 8, MaxTokens: 5, N: 1, Estimated: 13}}, // assistant c1 function f {} tool c1 42: 9+2+8+1+2+4+2+2 = 30 → 8
	{"chat max_completion_tokens wins", "/v1/chat/completions", `{"messages":[{"role":"user","content":"abcd"}],"max_tokens":10,"max_completion_tokens":50}`,
		Request{Prompts: 1, PromptTokens: 2, MaxTokens: 50, N: 1, Estimated: 52}},
	{"chat max_completion_tokens zero falls back", "/v1/chat/completions", `{"messages":[{"role":"user","content":"abcd"}],"max_tokens":10,"max_completion_tokens":0}`,
		Request{Prompts: 1, PromptTokens: 2, MaxTokens: 10, N: 1, Estimated: 12}},
	{"chat both zero is the default", "/v1/chat/completions", `{"messages":[{"role":"user","content":"abcd"}],"max_tokens":0}`,
		Request{Prompts: 1, PromptTokens: 2, MaxTokens: 100, DefaultMax: true, N: 1, Estimated: 102}},
	{"chat n", "/v1/chat/completions", `{"messages":[{"role":"user","content":"abcd"}],"max_tokens":10,"n":4,"stream":true}`,
		Request{Stream: true, Prompts: 1, PromptTokens: 2, MaxTokens: 10, N: 4, Estimated: 48}},
	{"chat tools count keys and strings", "/v1/chat/completions", `{"messages":[{"role":"user","content":"abcd"}],"max_tokens":1,"tools":[{"type":"function","function":{"name":"get","parameters":{"type":"object"}}}]}`,
		Request{Prompts: 1, PromptTokens: 14, MaxTokens: 1, N: 1, Estimated: 15}}, // 8 + type function function name get parameters type object = 4+8+8+4+3+10+4+6 = 47 → 55 → 14
	{"chat ignores completion prompt", "/v1/chat/completions", `{"messages":[{"role":"user","content":"abcd"}],"max_tokens":1,"prompt":5,"max_output_tokens":"x"}`,
		Request{Prompts: 1, PromptTokens: 2, MaxTokens: 1, N: 1, Estimated: 3}},
	{"chat unknown part type counted generically", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"refusal","refusal":"abcd"}]}],"max_tokens":1}`,
		Request{Prompts: 1, PromptTokens: 2, MaxTokens: 1, N: 1, Estimated: 3}}, // user + abcd = 8 → 2
	{"chat multibyte text", "/v1/chat/completions", `{"messages":[{"role":"user","content":"世界世界"}],"max_tokens":1}`,
		Request{Prompts: 1, PromptTokens: 4, MaxTokens: 1, N: 1, Estimated: 5}}, // 4 + 12 bytes = 16 → 4

	// Responses.
	{"responses string input", "/v1/responses", `{"model":"m","input":"Tell me a story","max_output_tokens":30}`,
		Request{Model: "m", Prompts: 1, PromptTokens: 4, MaxTokens: 30, N: 1, Estimated: 34}},
	{"responses items and instructions", "/v1/responses", `{"instructions":"abcd","input":[{"role":"user","content":[{"type":"input_text","text":"abcd"},{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]}],"stream":true,"n":3}`,
		Request{Stream: true, Prompts: 1, PromptTokens: 509, MaxTokens: 100, DefaultMax: true, N: 1, media: 1, Estimated: 609}}, // abcd user input_text abcd input_image: 4+4+10+4+11 = 33 → 9, + 500

	{"responses escaped data URL is media", "/v1/responses", `{"input":[{"type":"input_image","image_url":"d\u0061ta:image/png;base64,AAAA"}],"max_output_tokens":1}`,
		Request{Prompts: 1, PromptTokens: 503, MaxTokens: 1, N: 1, media: 1, Estimated: 504}}, // input_image 11 → 3, + 500
	{"responses media key", "/v1/responses", `{"input":[{"type":"input_image","image_url":"https://x/a.png"},{"type":"input_file","file_id":"f1"}],"max_output_tokens":1}`,
		Request{Prompts: 1, PromptTokens: 1006, MaxTokens: 1, N: 1, media: 2, Estimated: 1007}}, // input_image input_file 21 → 6, + 2×500
	{"tool schema key is not media", "/v1/chat/completions", `{"messages":[{"role":"user","content":"abcd"}],"max_tokens":1,"tools":[{"image_url":"x"}]}`,
		Request{Prompts: 1, PromptTokens: 5, MaxTokens: 1, N: 1, Estimated: 6}}, // 8 + 9 + 1 = 18 → 5

	// Embeddings.
	{"embedding string", "/v1/embeddings", `{"model":"e","input":"abcdefgh","n":5,"max_tokens":7}`,
		Request{Model: "e", Prompts: 1, PromptTokens: 2, N: 1, Estimated: 2}},
	{"embedding batch", "/v1/embeddings", `{"input":["abcd","abcd","a"],"encoding_format":"float"}`,
		Request{Prompts: 3, PromptTokens: 3, N: 1, Estimated: 3}},
	{"embedding token ids", "/v1/embeddings", `{"input":[[1,2,3],[4]]}`,
		Request{Prompts: 2, PromptTokens: 4, N: 1, Estimated: 4}},
	{"embedding chat messages", "/v1/embeddings", `{"messages":[{"role":"user","content":"abcd"}]}`,
		Request{Prompts: 1, PromptTokens: 2, N: 1, Estimated: 2}},
	{"embedding empty string", "/v1/embeddings", `{"input":""}`,
		Request{Prompts: 1, N: 1, Estimated: 1}},

	// Score and rerank.
	{"rerank", "/v1/rerank", `{"model":"r","query":"abcd","documents":["abcdefgh","ab"],"top_n":2}`,
		Request{Model: "r", Prompts: 1, PromptTokens: 5, N: 1, Estimated: 5}}, // 14 bytes → 4, + top_n
	{"score", "/v1/score", `{"text_1":"abcd","text_2":["abcd","abcd"]}`,
		Request{Prompts: 1, PromptTokens: 3, N: 1, Estimated: 3}},
	{"rerank v2 empty", "/v2/rerank", `{}`,
		Request{Prompts: 1, N: 1, Estimated: 1}},
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tt := range classifyCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(kindOf(t, tt.path), []byte(tt.body), testEstimator)
			if err != nil {
				t.Fatalf("Parse(%s, %.80s) error = %v", tt.path, tt.body, err)
			}
			if tt.want.MaxTokens > 0 && tt.want.Memory == 0 { // no prompt_logprobs in these bodies
				tt.want.Memory = int64(tt.want.Prompts*tt.want.N) * 32
			}
			if got != tt.want {
				t.Errorf("Parse(%s, %.80s)\n got %+v\nwant %+v", tt.path, tt.body, got, tt.want)
			}
		})
	}
}

// TestHasPriority: the classifier's own pass notes a top-level "priority"
// key as vLLM reads it (escapes decoded, case and depth exact), so that a
// class's priority never replaces the client's.
func TestHasPriority(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path, body string
		want       bool
	}{
		{"/v1/completions", `{"prompt":"x","priority":3}`, true},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"priority":null}`, true},
		{"/v1/completions", `{"prompt":"x","priorit\u0079":-1}`, true},
		{"/v1/embeddings", `{"input":"x","priority":0}`, true},
		{"/v1/completions", `{"prompt":"x"}`, false},
		{"/v1/completions", `{"prompt":"x","Priority":3}`, false},
		{"/v1/completions", `{"prompt":"x","extra":{"priority":3}}`, false},
		{"/v1/completions", `{"prompt":"priority"}`, false},
	}
	for _, tt := range tests {
		got, err := Parse(kindOf(t, tt.path), []byte(tt.body), testEstimator)
		if err != nil || got.HasPriority != tt.want {
			t.Errorf("Parse(%s, %s).HasPriority = %v (%v), want %v", tt.path, tt.body, got.HasPriority, err, tt.want)
		}
	}
}

func TestClassifyWithoutBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path string
		want Request
	}{
		{"/v1/models", Request{N: 1}},
		{"/v1/audio/transcriptions", Request{Prompts: 1, PromptTokens: 500, MaxTokens: 100, DefaultMax: true, N: 1, media: 1, Estimated: 600}},
	}
	for _, tt := range tests {
		got, err := Parse(kindOf(t, tt.path), []byte("--multipart\r\n not JSON"), testEstimator)
		if err != nil || got != tt.want {
			t.Errorf("Parse(%s, multipart) = %+v, %v; want %+v, nil", tt.path, got, err, tt.want)
		}
	}
}

func TestEstimatorDefaults(t *testing.T) {
	t.Parallel()
	body := []byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"` + strings.Repeat("x", 36) + `"},{"type":"image_url","image_url":{"url":"https://x"}}]}]}`)
	want := Request{Prompts: 1, PromptTokens: 10 + 1024, MaxTokens: 256, DefaultMax: true, N: 1, media: 1, Estimated: 10 + 1024 + 256, Memory: 32}
	for _, est := range []Estimator{{}, {CharsPerToken: -1, DefaultMaxTokens: -1, mediaTokens: -1, BytesPerLogit: -1}, {CharsPerToken: math.NaN()}, {CharsPerToken: math.Inf(1)}} {
		got, err := Parse(kindOf(t, "/v1/chat/completions"), body, est)
		if err != nil || got != want {
			t.Errorf("Parse with %+v = %+v, %v; want %+v", est, got, err, want)
		}
	}
	got, err := Parse(kindOf(t, "/v1/completions"), []byte(`{"prompt":"`+strings.Repeat("x", 9)+`","max_tokens":0}`), Estimator{CharsPerToken: 2.5})
	if err != nil || got.PromptTokens != 4 {
		t.Errorf("9 bytes at 2.5 chars per token = %d tokens (%v), want 4", got.PromptTokens, err)
	}
}

func TestClassifyErrors(t *testing.T) {
	t.Parallel()
	const (
		cmp  = "/v1/completions"
		chat = "/v1/chat/completions"
		emb  = "/v1/embeddings"
		resp = "/v1/responses"
	)
	msgs := func(inner string) string { return `{"messages":[` + inner + `]}` }
	tests := []struct {
		name, path, body string
		param, code, msg string
	}{
		{"not an object", chat, `[{"role":"user"}]`, "", codeInvalidJSON, "must be a JSON object"},
		{"malformed", chat, `{"messages":[}`, "", codeInvalidJSON, "invalid JSON"},
		{"duplicate key", cmp, `{"prompt":"a","max_tokens":1,"max_tokens":99999}`, "", codeInvalidJSON, "duplicate key"},

		{"prompt missing", cmp, `{"max_tokens":1}`, "prompt", codeMissing, "required"},
		{"prompt null", cmp, `{"prompt":null}`, "prompt", codeMissing, "required"},
		{"prompt number", cmp, `{"prompt":1}`, "prompt", codeInvalidType, "must be a string, a list of strings"},
		{"prompt object", cmp, `{"prompt":{"text":"x"}}`, "prompt", codeInvalidType, "must be a string"},
		{"prompt empty list", cmp, `{"prompt":[]}`, "prompt", codeInvalidValue, "must not be empty"},
		{"prompt empty list of token ids", cmp, `{"prompt":[[]]}`, "prompt[0]", codeInvalidValue, "must not be empty"},
		{"prompt batch with an empty list of token ids", cmp, `{"prompt":[[1,2],[]]}`, "prompt[1]", codeInvalidValue, "must not be empty"},
		{"embedding input empty list of token ids", emb, `{"input":[[]]}`, "input[0]", codeInvalidValue, "must not be empty"},
		{"prompt mixed", cmp, `{"prompt":["a",1]}`, "prompt[1]", codeInvalidType, "same type"},
		{"prompt mixed lists", cmp, `{"prompt":[[1],"x"]}`, "prompt[1]", codeInvalidType, "same type"},
		{"prompt null element", cmp, `{"prompt":[null]}`, "prompt[0]", codeInvalidType, "must be a string"},
		{"prompt object element", cmp, `{"prompt":[{}]}`, "prompt[0]", codeInvalidType, "must be a string"},
		{"negative token id", cmp, `{"prompt":[1,-2]}`, "prompt[1]", codeInvalidValue, "non-negative integers"},
		{"fractional token id", cmp, `{"prompt":[1,2.5]}`, "prompt[1]", codeInvalidValue, "non-negative integers"},
		{"huge token id", cmp, `{"prompt":[99999999999999999999]}`, "prompt[0]", codeInvalidValue, "non-negative integers"},
		{"bad nested token id", cmp, `{"prompt":[[1],[2,"x"]]}`, "prompt[1][1]", codeInvalidValue, "non-negative integers"},
		{"prompt_embeds number", cmp, `{"prompt_embeds":1}`, "prompt_embeds", codeInvalidType, "base64"},
		{"negative max_tokens", cmp, `{"prompt":"a","max_tokens":-1}`, "max_tokens", codeInvalidValue, "at least 0"},
		{"string max_tokens", cmp, `{"prompt":"a","max_tokens":"100"}`, "max_tokens", codeInvalidType, "must be an integer"},
		{"fractional max_tokens", cmp, `{"prompt":"a","max_tokens":1.5}`, "max_tokens", codeInvalidType, "must be an integer"},
		{"exponent max_tokens", cmp, `{"prompt":"a","max_tokens":1e3}`, "max_tokens", codeInvalidType, "must be an integer"},
		{"huge max_tokens", cmp, `{"prompt":"a","max_tokens":99999999999999999999}`, "max_tokens", codeInvalidValue, "out of range"},
		{"bool max_tokens", cmp, `{"prompt":"a","max_tokens":true}`, "max_tokens", codeInvalidType, "must be an integer"},
		{"n zero", cmp, `{"prompt":"a","n":0}`, "n", codeInvalidValue, "at least 1"},
		{"n negative", chat, `{"messages":[{"role":"user","content":"a"}],"n":-3}`, "n", codeInvalidValue, "at least 1"},
		{"n string", cmp, `{"prompt":"a","n":"2"}`, "n", codeInvalidType, "must be an integer"},
		{"best_of zero", cmp, `{"prompt":"a","best_of":0}`, "best_of", codeInvalidValue, "at least 1"},
		{"stream string", cmp, `{"prompt":"a","stream":"true"}`, "stream", codeInvalidType, "must be a boolean"},
		{"stream number", chat, `{"messages":[{"role":"user","content":"a"}],"stream":1}`, "stream", codeInvalidType, "must be a boolean"},
		{"model number", cmp, `{"model":5,"prompt":"a"}`, "model", codeInvalidType, "must be a string"},
		{"model list", chat, `{"model":["a"]}`, "model", codeInvalidType, "must be a string"},
		{"case variant max_tokens", cmp, `{"prompt":"a","Max_Tokens":5}`, "Max_Tokens", codeInvalidValue, `did you mean "max_tokens"`},
		{"case variant model", chat, `{"MODEL":"x"}`, "MODEL", codeInvalidValue, `did you mean "model"`},
		{"long s variant", cmp, `{"prompt":"a","max_tokenſ":5}`, "max_tokenſ", codeInvalidValue, `did you mean "max_tokens"`},
		{"kelvin variant escaped", cmp, `{"prompt":"a","max_to\u212Aens":5}`, "max_to\u212Aens", codeInvalidValue, `did you mean "max_tokens"`},
		{"case variant on other kind", emb, `{"input":"a","Stream":true}`, "Stream", codeInvalidValue, `did you mean "stream"`},

		{"messages missing", chat, `{"model":"m"}`, "messages", codeMissing, "required"},
		{"messages string", chat, `{"messages":"hi"}`, "messages", codeInvalidType, "must be a list of message objects"},
		{"messages null", chat, `{"messages":null}`, "messages", codeInvalidType, "must be a list"},
		{"messages empty", chat, `{"messages":[]}`, "messages", codeInvalidValue, "must not be empty"},
		{"message string", chat, msgs(`"hi"`), "messages[0]", codeInvalidType, "must be an object"},
		{"message without role", chat, msgs(`{"content":"x"}`), "messages[0].role", codeMissing, "required"},
		{"role number", chat, msgs(`{"role":1,"content":"x"}`), "messages[0].role", codeInvalidType, "must be a string"},
		{"role case variant", chat, msgs(`{"Role":"user","content":"x"}`), "messages[0].Role", codeInvalidValue, `did you mean "role"`},
		{"content number", chat, msgs(`{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":5}`),
			"messages[2].content", codeInvalidType, "must be a string, null or a list of content parts"},
		{"content object", chat, msgs(`{"role":"user","content":{"type":"text","text":"x"}}`), "messages[0].content", codeInvalidType, "list of content parts"},
		{"content case variant", chat, msgs(`{"role":"user","CONTENT":"x"}`), "messages[0].CONTENT", codeInvalidValue, `did you mean "content"`},
		{"part string", chat, msgs(`{"role":"user","content":["x"]}`), "messages[0].content[0]", codeInvalidType, "must be an object"},
		{"part text missing", chat, msgs(`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text"}]}`), "messages[0].content[1].text", codeMissing, "required"},
		{"part text number", chat, msgs(`{"role":"user","content":[{"type":"text","text":5}]}`), "messages[0].content[0].text", codeInvalidType, "must be a string"},
		{"part text null", chat, msgs(`{"role":"user","content":[{"type":"text","text":null}]}`), "messages[0].content[0].text", codeInvalidType, "must be a string"},
		{"part type number", chat, msgs(`{"role":"user","content":[{"type":1}]}`), "messages[0].content[0].type", codeInvalidType, "must be a string"},
		{"part type case variant", chat, msgs(`{"role":"user","content":[{"Type":"text","text":"x"}]}`), "messages[0].content[0].Type", codeInvalidValue, `did you mean "type"`},

		{"responses input missing", resp, `{"instructions":"x"}`, "input", codeMissing, "required"},
		{"responses bad max_output_tokens", resp, `{"input":"x","max_output_tokens":-5}`, "max_output_tokens", codeInvalidValue, "at least 0"},
		{"embedding input missing", emb, `{"model":"e"}`, "input", codeMissing, "required"},
		{"embedding input empty", emb, `{"input":[]}`, "input", codeInvalidValue, "must not be empty"},
		{"embedding input bool", emb, `{"input":true}`, "input", codeInvalidType, "must be a string"},
		{"embedding bad messages", emb, `{"messages":[{"role":"user","content":7}]}`, "messages[0].content", codeInvalidType, "list of content parts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse(kindOf(t, tt.path), []byte(tt.body), testEstimator)
			var bre *Error
			if !errors.As(err, &bre) {
				t.Fatalf("Parse(%s, %s) = %+v, %v; want a *Error", tt.path, tt.body, c, err)
			}
			if bre.Param != tt.param || bre.Code != tt.code || !strings.Contains(bre.Message, tt.msg) {
				t.Errorf("Parse(%s, %s) error = {Param:%q Code:%q Message:%q}, want param %q, code %q, message containing %q",
					tt.path, tt.body, bre.Param, bre.Code, bre.Message, tt.param, tt.code, tt.msg)
			}
			if want := "classify: " + bre.ClientMessage(); err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
		})
	}
}

// TestClassifyFiles classifies the larger bodies in testdata/classify.
func TestClassifyFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file, path string
		want       Request
	}{
		{"chat-4k.json", "/v1/chat/completions", Request{Model: "Qwen/Qwen2.5-7B-Instruct", Stream: true, Prompts: 1,
			PromptTokens: 886, MaxTokens: 512, N: 1, Estimated: 1398, Memory: 32}},
		{"chat-multimodal.json", "/v1/chat/completions", Request{Model: "Qwen/Qwen2.5-VL-7B-Instruct", Prompts: 1,
			PromptTokens: 1026, MaxTokens: 300, N: 1, media: 2, Estimated: 1326, Memory: 32}},
		{"responses-items.json", "/v1/responses", Request{Model: "openai/gpt-oss-20b", Stream: true, Prompts: 1,
			PromptTokens: 24, MaxTokens: 200, N: 1, Estimated: 224, Memory: 32}},
		{"completions-batch.json", "/v1/completions", Request{Model: "fake-model", Prompts: 3,
			PromptTokens: 13, MaxTokens: 16, N: 2, Estimated: 122, Memory: 192}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			body, err := os.ReadFile(filepath.Join("testdata", "classify", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse(kindOf(t, tt.path), body, testEstimator)
			if err != nil || got != tt.want {
				t.Errorf("Parse(%s) = %+v, %v\nwant %+v", tt.file, got, err, tt.want)
			}
		})
	}
}
