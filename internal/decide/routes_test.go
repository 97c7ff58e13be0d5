package decide

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
)

func TestLookupRoute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, path string
		wantStatus         int // 0: found
		wantKind           classify.Kind
		wantBody           bool
	}{
		{"completions", "POST", "/v1/completions", 0, classify.KindCompletion, true},
		{"chat", "POST", "/v1/chat/completions", 0, classify.KindChat, true},
		{"responses", "POST", "/v1/responses", 0, classify.KindResponses, true},
		{"embeddings", "POST", "/v1/embeddings", 0, classify.KindEmbedding, true},
		{"score", "POST", "/v1/score", 0, classify.KindScore, true},
		{"rerank v1", "POST", "/v1/rerank", 0, classify.KindScore, true},
		{"rerank v2", "POST", "/v2/rerank", 0, classify.KindScore, true},
		{"transcriptions", "POST", "/v1/audio/transcriptions", 0, classify.KindAudio, false},
		{"translations", "POST", "/v1/audio/translations", 0, classify.KindAudio, false},
		{"models", "GET", "/v1/models", 0, classify.KindModels, false},
		{"models head", "HEAD", "/v1/models", 0, classify.KindModels, false},

		// Methods.
		{"get completions", "GET", "/v1/completions", 405, classify.KindCompletion, true},
		{"put chat", "PUT", "/v1/chat/completions", 405, classify.KindChat, true},
		{"lower-case post", "post", "/v1/completions", 405, classify.KindCompletion, true},
		{"options preflight", "OPTIONS", "/v1/chat/completions", 405, classify.KindChat, true},
		{"post models", "POST", "/v1/models", 405, classify.KindModels, false},
		{"delete models", "DELETE", "/v1/models", 405, classify.KindModels, false},

		// Admin, development and unversioned routes stay closed.
		{"load lora", "POST", "/v1/load_lora_adapter", 404, 0, false},
		{"unload lora", "POST", "/v1/unload_lora_adapter", 404, 0, false},
		{"pause", "POST", "/pause", 404, 0, false},
		{"resume", "POST", "/resume", 404, 0, false},
		{"sleep", "POST", "/sleep", 404, 0, false},
		{"wake up", "POST", "/wake_up", 404, 0, false},
		{"reset prefix cache", "POST", "/reset_prefix_cache", 404, 0, false},
		{"invocations", "POST", "/invocations", 404, 0, false},
		{"collective rpc", "POST", "/collective_rpc", 404, 0, false},
		{"start profile", "POST", "/start_profile", 404, 0, false},
		{"server info", "GET", "/server_info", 404, 0, false},
		{"metrics", "GET", "/metrics", 404, 0, false},
		{"health", "GET", "/health", 404, 0, false},
		{"load", "GET", "/load", 404, 0, false},
		{"tokenize", "POST", "/tokenize", 404, 0, false},
		{"detokenize", "POST", "/detokenize", 404, 0, false},
		{"unversioned score", "POST", "/score", 404, 0, false},
		{"unversioned rerank", "POST", "/rerank", 404, 0, false},
		{"pooling", "POST", "/pooling", 404, 0, false},
		{"classify", "POST", "/classify", 404, 0, false},
		{"retrieve response", "GET", "/v1/responses/resp_123", 404, 0, false},
		{"cancel response", "POST", "/v1/responses/resp_123/cancel", 404, 0, false},
		{"realtime", "GET", "/v1/realtime", 404, 0, false},
		{"anthropic messages", "POST", "/v1/messages", 404, 0, false},
		{"chat render", "POST", "/v1/chat/completions/render", 404, 0, false},
		{"root", "GET", "/", 404, 0, false},
		{"empty", "GET", "", 404, 0, false},
		{"asterisk", "OPTIONS", "*", 404, 0, false},

		// Non-canonical spellings of allowed routes never match.
		{"trailing slash", "POST", "/v1/completions/", 404, 0, false},
		{"double slash", "POST", "/v1//completions", 404, 0, false},
		{"leading double slash", "POST", "//v1/completions", 404, 0, false},
		{"dot segment", "POST", "/v1/./completions", 404, 0, false},
		{"dot dot segment", "POST", "/v1/x/../completions", 404, 0, false},
		{"dot dot to admin", "POST", "/v1/completions/../../pause", 404, 0, false},
		{"encoded slash", "POST", "/v1%2Fcompletions", 404, 0, false},
		{"encoded slash lower", "POST", "/v1%2fcompletions", 404, 0, false},
		{"encoded letter", "POST", "/v1/%63ompletions", 404, 0, false},
		{"encoded dot", "POST", "/v1/%2e/completions", 404, 0, false},
		{"encoded dot dot", "POST", "/v1/%2e%2e/v1/completions", 404, 0, false},
		{"backslash", "POST", "/v1\\completions", 404, 0, false},
		{"encoded backslash", "POST", "/v1%5Ccompletions", 404, 0, false},
		{"nul", "POST", "/v1/completions\x00", 404, 0, false},
		{"encoded nul", "POST", "/v1/completions%00", 404, 0, false},
		{"upper case", "POST", "/V1/COMPLETIONS", 404, 0, false},
		{"mixed case", "POST", "/v1/Completions", 404, 0, false},
		{"semicolon parameter", "POST", "/v1/completions;x=1", 404, 0, false},
		{"no leading slash", "POST", "v1/completions", 404, 0, false},
		{"absolute URL", "POST", "http://pod/v1/completions", 404, 0, false},
		{"trailing space", "POST", "/v1/completions ", 404, 0, false},
		{"unicode slash", "POST", "/v1\u2215completions", 404, 0, false},
		{"overlong UTF-8 slash", "POST", "/v1\xc0\xafcompletions", 404, 0, false},
		{"prefix only", "POST", "/v1", 404, 0, false},
		{"prefix of route", "POST", "/v1/chat", 404, 0, false},
		{"route plus suffix", "POST", "/v1/completionsx", 404, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt, rf := lookupRoute(tt.method, tt.path)
			switch {
			case tt.wantStatus == 0 && rf != nil:
				t.Fatalf("LookupRoute(%q, %q) refused with %d (%s), want found", tt.method, tt.path, rf.Status, rf.message)
			case tt.wantStatus != 0 && rf == nil:
				t.Fatalf("LookupRoute(%q, %q) = %+v, want status %d", tt.method, tt.path, rt, tt.wantStatus)
			case rf != nil && rf.Status != tt.wantStatus:
				t.Fatalf("LookupRoute(%q, %q) status = %d, want %d", tt.method, tt.path, rf.Status, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusNotFound {
				if rt.Path != "" {
					t.Errorf("LookupRoute(%q, %q) route = %+v on 404, want zero", tt.method, tt.path, rt)
				}
				if rf.Reason != ReasonNotFound {
					t.Errorf("LookupRoute(%q, %q) reason = %q, want %q", tt.method, tt.path, rf.Reason, ReasonNotFound)
				}
				return
			}
			if rt.kind != tt.wantKind || rt.body != tt.wantBody || rt.Path != tt.path {
				t.Errorf("LookupRoute(%q, %q) = %+v, want kind %v body %v", tt.method, tt.path, rt, tt.wantKind, tt.wantBody)
			}
			if tt.wantStatus == http.StatusMethodNotAllowed && !strings.Contains(rf.message, rt.Allow()) {
				t.Errorf("LookupRoute(%q, %q) message = %q, want it to name %q", tt.method, tt.path, rf.message, rt.Allow())
			}
		})
	}
}

// TestLookupRouteFromHTTP feeds request lines through net/http's own parser,
// as the handler sees them, and looks up r.URL.EscapedPath().
func TestLookupRouteFromHTTP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		target string
		found  bool
	}{
		{"/v1/completions", true},
		{"/v1/completions?stream=true", true},
		{"http://gatekeeper/v1/completions", true},
		{"/v1/%63ompletions", false},
		{"/v1%2Fcompletions", false},
		{"/v1/completions%2F", false},
		{"/v1/./completions", false},
		{"/v1/foo/../completions", false},
		{"/v1//completions", false},
		{"/v1/completions/", false},
		{"/v1/completions#frag", false}, // a request line has no fragment: "#" is part of the path
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, tt.target, nil)
			_, rf := lookupRoute(r.Method, r.URL.EscapedPath())
			if found := rf == nil; found != tt.found {
				t.Errorf("LookupRoute(POST, EscapedPath of %q = %q) found = %v, want %v",
					tt.target, r.URL.EscapedPath(), found, tt.found)
			}
		})
	}
}

func TestRouteTableIsCanonical(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, rt := range routes {
		if seen[rt.Path] {
			t.Errorf("route %q listed twice", rt.Path)
		}
		seen[rt.Path] = true
		if !strings.HasPrefix(rt.Path, "/v1/") && !strings.HasPrefix(rt.Path, "/v2/") {
			t.Errorf("route %q is outside /v1/ and /v2/", rt.Path)
		}
		for _, ch := range rt.Path {
			if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '/' || ch == '_') {
				t.Errorf("route %q has a non-canonical character %q", rt.Path, ch)
			}
		}
		if strings.Contains(rt.Path, "//") || strings.HasSuffix(rt.Path, "/") {
			t.Errorf("route %q has an empty segment", rt.Path)
		}
		if len(rt.methods) == 0 {
			t.Errorf("route %q allows no method", rt.Path)
		}
		if rt.body != rt.kind.JSON() {
			t.Errorf("route %q: Body = %v for kind %v", rt.Path, rt.body, rt.kind)
		}
	}
}

func TestQuoteMethod(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"GET": "GET", "BREW": "BREW", "GET\r\nX": "(invalid)",
		`"`: "(invalid)", strings.Repeat("A", 17): "(too long)", "GÉT": "(invalid)"} {
		if got := quoteMethod(in); got != want {
			t.Errorf("quoteMethod(%q) = %q, want %q", in, got, want)
		}
	}
}
