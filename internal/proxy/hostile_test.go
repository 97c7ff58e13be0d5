package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// rawExchange writes raw bytes to addr on a fresh connection and reads one
// response. The deadline bounds a broken test; nothing waits on it.
func rawExchange(t *testing.T, addr, raw string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", raw, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// recordingPod remembers every request that reached it, with its framing.
type recordingPod struct {
	mu   sync.Mutex
	seen []podRequest
}

type podRequest struct {
	path          string
	contentLength int64
	te            []string
	body          string
	header        http.Header
}

func (p *recordingPod) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.seen = append(p.seen, podRequest{path: r.URL.Path, contentLength: r.ContentLength,
		te: r.TransferEncoding, body: string(b), header: r.Header.Clone()})
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"choices":[]}`)
}

func (p *recordingPod) requests() []podRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]podRequest(nil), p.seen...)
}

const completion = `{"model":"m","prompt":"hi","max_tokens":4}`

// TestSmugglingRefused sends framing that a proxy and a pod could read
// differently. Each is refused before the handler runs, and the pod sees
// nothing.
func TestSmugglingRefused(t *testing.T) {
	const head = "POST /v1/completions HTTP/1.1\r\nHost: gk\r\n"
	tests := []struct {
		name string
		raw  string
		want int
	}{
		{"two content lengths", head + "Content-Length: 2\r\nContent-Length: 44\r\n\r\n{}", 400},
		{"content length list", head + "Content-Length: 2, 44\r\n\r\n{}", 400},
		{"signed content length", head + "Content-Length: +44\r\n\r\n" + completion, 400},
		{"space before colon", head + "Transfer-Encoding : chunked\r\nContent-Length: 44\r\n\r\n" + completion, 400},
		{"unknown transfer coding", head + "Transfer-Encoding: xchunked\r\nContent-Length: 44\r\n\r\n" + completion, 501},
		{"chunked not last", head + "Transfer-Encoding: chunked, identity\r\n\r\n2c\r\n" + completion + "\r\n0\r\n\r\n", 501},
		{"transfer encoding twice", head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501},
		{"bare CR in a header", head + "X-Request-Id: a\rb\r\nContent-Length: 44\r\n\r\n" + completion, 400},
		{"NUL in a header", head + "X-Request-Id: a\x00b\r\nContent-Length: 44\r\n\r\n" + completion, 400},
		{"two hosts", head + "Host: other\r\nContent-Length: 44\r\n\r\n" + completion, 400},
		{"no host", "POST /v1/completions HTTP/1.1\r\nContent-Length: 44\r\n\r\n" + completion, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &recordingPod{}
			tp := newTestProxy(t, pod, nil)
			res := rawExchange(t, tp.srv.Listener.Addr().String(), tt.raw)
			if res.StatusCode != tt.want {
				t.Errorf("status = %d, want %d", res.StatusCode, tt.want)
			}
			if tt.want == 400 && !res.Close {
				t.Error("an ambiguous request must close its connection")
			}
			tp.close()
			if got := pod.requests(); len(got) != 0 {
				t.Errorf("the pod saw %d requests, want none: %+v", len(got), got)
			}
		})
	}
}

// TestAmbiguousFramingIsRefused covers the framings Go's server would accept
// under RFC 9112 (Transfer-Encoding overriding Content-Length, §6.3; an
// obsolete line fold, §5.2): framing.Guard sees them in the raw bytes and the
// request is refused with 400 bad_request and the connection closed, so
// neither it nor a request hidden behind it reaches the pod. On a keep-alive
// connection the clean requests before it are served, and the ambiguous one
// is still caught, whatever framed the body before it.
func TestAmbiguousFramingIsRefused(t *testing.T) {
	smuggled := "POST /pause HTTP/1.1\r\nHost: gk\r\nContent-Length: 2\r\n\r\n{}"
	clean := "POST /v1/completions HTTP/1.1\r\nHost: gk\r\nContent-Length: " + itoa(len(completion)) + "\r\n\r\n" + completion
	cleanChunked := "POST /v1/completions HTTP/1.1\r\nHost: gk\r\nTransfer-Encoding: chunked\r\n\r\n" +
		hexLen(10) + ";ext=1\r\n" + completion[:10] + "\r\n" + hexLen(len(completion)-10) + "\r\n" + completion[10:] + "\r\n0\r\n\r\n"
	both := "POST /v1/completions HTTP/1.1\r\nHost: gk\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" +
		hexLen(len(completion)) + "\r\n" + completion + "\r\n0\r\n\r\n"
	tests := []struct {
		name string
		reqs []string // sent one at a time on one connection; all but the last are clean
	}{
		{"content length and chunked, smuggled request", []string{"POST /v1/completions HTTP/1.1\r\nHost: gk\r\nContent-Length: " +
			itoa(5+len(smuggled)) + "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled}},
		{"chunked then content length, valid body", []string{both}},
		{"folded header", []string{"POST /v1/completions HTTP/1.1\r\nHost: gk\r\nX-Note: a\r\n Transfer-Encoding: chunked\r\n" +
			"Content-Length: " + itoa(len(completion)) + "\r\n\r\n" + completion}},
		{"malformed chunk size", []string{"POST /v1/completions HTTP/1.1\r\nHost: gk\r\nTransfer-Encoding: chunked\r\n\r\n" +
			hexLen(len(completion)) + "\n" + completion + "\r\n0\r\n\r\n"}},
		{"keep-alive: clean, then both", []string{clean, both}},
		{"keep-alive: clean chunked, then both", []string{cleanChunked, both}},
		{"keep-alive: clean, clean chunked, then a fold", []string{clean, cleanChunked,
			"GET /v1/models HTTP/1.1\r\nHost: gk\r\nX-Note: a\r\n\tb\r\n\r\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &recordingPod{}
			tp := newTestProxy(t, pod, nil)
			c, err := net.Dial("tcp", tp.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			// One write per request, each after the previous answer (a
			// client that pipelines makes its whole connection suspect).
			for i, raw := range tt.reqs {
				_, _ = io.WriteString(c, raw)
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				want := 200
				if i == len(tt.reqs)-1 {
					want = 400
				}
				if res.StatusCode != want {
					t.Errorf("request %d = %d, want %d", i+1, res.StatusCode, want)
				}
				if want == 400 && (!res.Close || res.Header.Get("X-Gatekeeper-Reason") != "bad_request") {
					t.Errorf("ambiguous request: close %v, reason %q; want the connection closed, bad_request",
						res.Close, res.Header.Get("X-Gatekeeper-Reason"))
				}
			}
			if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Errorf("after the 400 the connection gave %d bytes, %v; want it closed", n, err)
			}
			c.Close()
			tp.close()
			got := pod.requests()
			if len(got) != len(tt.reqs)-1 {
				t.Fatalf("the pod saw %d requests, want the %d clean ones: %+v", len(got), len(tt.reqs)-1, got)
			}
			for _, r := range got {
				if r.path != "/v1/completions" || len(r.te) != 0 || r.contentLength != int64(len(r.body)) || r.body != completion {
					t.Errorf("pod saw %+v, want the clean /v1/completions framed by Content-Length only", r)
				}
			}
			if o := tp.outcomes(t); o[decide.OutcomeBadRequest] != 1 {
				t.Errorf("outcome bad_request = %v, want 1", o[decide.OutcomeBadRequest])
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func hexLen(n int) string { return strconv.FormatInt(int64(n), 16) }

// TestPathTricksAre404 sends paths that a lax router could map onto an
// inference route or onto one of vLLM's admin routes. All are 404 from
// gatekeeper itself.
func TestPathTricksAre404(t *testing.T) {
	paths := []string{
		"//v1/completions",
		"/v1//completions",
		"/v1/completions/",
		"/v1%2Fcompletions",
		"/v1%2fcompletions",
		"/v1/%63ompletions",
		"/v1/../v1/completions",
		"/v1/./completions",
		"/x/../v1/completions",
		"/v1/completions/..",
		"/V1/completions",
		"/v1/Completions",
		"/v1/completions;x=1",
		"/v1/completions%00",
		"/pause",
		"/resume",
		"/sleep",
		"/wake_up",
		"/invocations",
		"/reset_prefix_cache",
		"/start_profile",
		"/collective_rpc",
		"/scale_elastic_ep",
		"/server_info",
		"/metrics",
		"/%70ause",
		"/v1/load_lora_adapter",
	}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			pod := &recordingPod{}
			tp := newTestProxy(t, pod, nil)
			res := rawExchange(t, tp.srv.Listener.Addr().String(),
				"POST "+p+" HTTP/1.1\r\nHost: gk\r\nContent-Type: application/json\r\nContent-Length: "+itoa(len(completion))+"\r\n\r\n"+completion)
			if res.StatusCode != 404 {
				t.Errorf("POST %s = %d, want 404", p, res.StatusCode)
			}
			if res.Header.Get("X-Gatekeeper-Reason") != "not_found" {
				t.Errorf("POST %s: reason %q, want not_found", p, res.Header.Get("X-Gatekeeper-Reason"))
			}
			tp.close()
			if got := pod.requests(); len(got) != 0 {
				t.Errorf("POST %s reached the pod: %+v", p, got)
			}
		})
	}
}

// TestJSONDifferentialsAre400 sends bodies that Go and Python would read
// differently; they are refused rather than estimated one way and executed
// another.
func TestJSONDifferentialsAre400(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100)
	tests := []struct{ name, path, body string }{
		{"duplicate max_tokens", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1,"max_tokens":100000}`},
		{"duplicate via escape", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1,"max_tok\u0065ns":100000}`},
		{"duplicate prompt", "/v1/completions", `{"model":"m","prompt":"hi","prompt":"` + strings.Repeat("x", 1000) + `"}`},
		{"duplicate nested", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a","content":"bb"}]}`},
		{"case variant max_tokens", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1,"Max_Tokens":100000}`},
		{"case variant only", "/v1/completions", `{"model":"m","prompt":"hi","MAX_TOKENS":100000}`},
		{"case variant messages", "/v1/chat/completions", `{"model":"m","messages":[],"Messages":[{"role":"user","content":"x"}]}`},
		{"invalid utf-8", "/v1/completions", "{\"model\":\"m\",\"prompt\":\"\xff\xfe\"}"},
		{"overlong utf-8", "/v1/completions", "{\"model\":\"m\",\"prompt\":\"\xc0\xaf\"}"},
		{"lone surrogate", "/v1/completions", `{"model":"m","prompt":"\ud800"}`},
		{"deep nesting", "/v1/completions", `{"model":"m","prompt":"hi","x":` + deep + `}`},
		{"NaN", "/v1/completions", `{"model":"m","prompt":"hi","temperature":NaN}`},
		{"Infinity", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":Infinity}`},
		{"huge number", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1e999}`},
		{"byte order mark", "/v1/completions", "\xef\xbb\xbf" + completion},
		{"trailing data", "/v1/completions", completion + `{"model":"m","prompt":"again"}`},
		{"top-level array", "/v1/completions", `[` + completion + `]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &recordingPod{}
			tp := newTestProxy(t, pod, nil)
			res := post(t, tp.srv.URL, tt.path, tt.body, nil)
			_, _ = io.Copy(io.Discard, res.Body)
			if res.StatusCode != 400 || res.Header.Get("X-Gatekeeper-Reason") != "bad_request" {
				t.Errorf("status = %d %q, want 400 bad_request", res.StatusCode, res.Header.Get("X-Gatekeeper-Reason"))
			}
			tp.close()
			if got := pod.requests(); len(got) != 0 {
				t.Errorf("the pod saw %+v", got)
			}
		})
	}
}

// TestRequestIDCannotInjectHeaders sends request ids that could split a
// header or a log line. Each is replaced by a generated id, which is the one
// the pod and the client see.
func TestRequestIDCannotInjectHeaders(t *testing.T) {
	tests := []struct{ name, line string }{
		{"folded CRLF injection", "X-Request-Id: abc\r\n Set-Cookie: session=evil\r\n"},
		{"encoded CRLF", "X-Request-Id: abc%0d%0aSet-Cookie:%20x\r\n"},
		{"space", "X-Request-Id: a b\r\n"},
		{"non-ASCII", "X-Request-Id: \xe2\x80\xa8abc\r\n"},
		{"tab", "X-Request-Id: a\tb\r\n"},
		{"too long", "X-Request-Id: " + strings.Repeat("a", 129) + "\r\n"},
		{"quote and brace", "X-Request-Id: a\"}{\r\n"},
		{"two ids", "X-Request-Id: good-1\r\nX-Request-Id: good-2\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &recordingPod{}
			tp := newTestProxy(t, pod, nil)
			res := rawExchange(t, tp.srv.Listener.Addr().String(),
				"POST /v1/completions HTTP/1.1\r\nHost: gk\r\n"+tt.line+"Content-Length: "+itoa(len(completion))+"\r\n\r\n"+completion)
			ids := res.Header.Values("X-Request-Id")
			if len(ids) != 1 || !validRequestID(ids[0]) {
				t.Fatalf("X-Request-Id = %q, want one generated id", ids)
			}
			if len(res.Header.Values("Set-Cookie")) != 0 {
				t.Errorf("a header was injected: %v", res.Header)
			}
			tp.close()
			got := pod.requests()
			if tt.name == "folded CRLF injection" {
				// A folded header is ambiguous framing: refused outright.
				if res.StatusCode != 400 || len(got) != 0 {
					t.Errorf("folded header = %d, pod saw %d; want 400 and nothing forwarded", res.StatusCode, len(got))
				}
				return
			}
			if tt.name == "two ids" {
				// The first valid id is kept; the pod gets exactly one.
				if ids[0] != "good-1" || len(got) != 1 || len(got[0].header.Values("X-Request-Id")) != 1 {
					t.Errorf("ids = %q, pod = %+v; want good-1 once", ids, got)
				}
				return
			}
			if len(got) != 1 || got[0].header.Get("X-Request-Id") != ids[0] || len(got[0].header.Values("X-Request-Id")) != 1 {
				t.Errorf("pod saw %+v, want the generated id %q once", got, ids[0])
			}
			// A generated id is the process prefix and a counter; the
			// client's value (or any part of it) is not in it.
			if !strings.HasPrefix(ids[0], tp.h.ids.prefix) {
				t.Errorf("X-Request-Id %q is not a generated id (prefix %q)", ids[0], tp.h.ids.prefix)
			}
		})
	}
}
