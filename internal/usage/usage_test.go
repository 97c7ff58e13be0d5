package usage

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), r.n)], r.data)
	r.data = r.data[k:]
	return k, nil
}

// sseChunk is one streamed chat completion chunk, as vLLM frames it.
func sseChunk(content, usage string) string {
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` +
		content + `"}}],"usage":` + usage + "}\n\n"
}

func usageOf(p, c int64) string {
	return fmt.Sprintf(`{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}`, p, p+c, c)
}

const (
	sseType  = "text/event-stream"
	jsonType = "application/json"
	sseDone  = "data: [DONE]\n\n"
)

var usageCases = []struct {
	name        string
	status      int
	contentType string
	encoding    string
	body        string
	want        Tokens // zero: unknown
}{
	{name: "sse usage in the last chunk", body: sseChunk("Hel", "null") + sseChunk("lo", "null") +
		`data: {"id":"chatcmpl-1","choices":[],"usage":` + usageOf(12, 2) + "}\n\n" + sseDone,
		want: Tokens{Prompt: 12, Completion: 2, Known: true}},
	{name: "sse usage on every chunk: the last wins", body: sseChunk("a", usageOf(12, 1)) + sseChunk("b", usageOf(12, 2)) +
		sseChunk("c", usageOf(12, 3)) + sseDone, want: Tokens{Prompt: 12, Completion: 3, Known: true}},
	{name: "sse no usage", body: `data: {"choices":[{"delta":{"content":"hi"}}]}` + "\n\n" + sseDone},
	{name: "sse usage null", body: sseChunk("a", "null") + sseChunk("b", "null") + sseDone},
	{name: "sse usage then null keeps it", body: sseChunk("a", usageOf(5, 1)) + sseChunk("b", "null") + sseDone,
		want: Tokens{Prompt: 5, Completion: 1, Known: true}},
	{name: "sse only [DONE]", body: sseDone},
	{name: "sse error event mid-stream", body: sseChunk("a", usageOf(6, 1)) +
		`data: {"error":{"message":"engine died","type":"InternalServerError","code":500}}` + "\n\n" + sseDone,
		want: Tokens{Prompt: 6, Completion: 1, Known: true, StreamError: true}},
	{name: "sse content mentioning error is not one", body: sseChunk(`an \"error\" here`, usageOf(2, 1)) + sseDone,
		want: Tokens{Prompt: 2, Completion: 1, Known: true}},
	{name: "sse CRLF line ends", body: strings.ReplaceAll(sseChunk("a", usageOf(7, 4))+sseDone, "\n", "\r\n"),
		want: Tokens{Prompt: 7, Completion: 4, Known: true}},
	{name: "sse no space after data:", body: `data:{"choices":[],"usage":` + usageOf(3, 9) + "}\n\n", want: Tokens{Prompt: 3, Completion: 9, Known: true}},
	{name: "sse comments and event fields ignored", body: ": ping\n\nevent: message\nid: 1\n" + sseChunk("a", usageOf(8, 8)) + ": bye\n\n",
		want: Tokens{Prompt: 8, Completion: 8, Known: true}},
	{name: "sse content mentioning usage", body: sseChunk("a", usageOf(2, 2)) + sseChunk(`the \"usage\" key`, "null") + sseDone,
		want: Tokens{Prompt: 2, Completion: 2, Known: true}},
	{name: "sse unterminated last line is discarded", body: sseChunk("a", "null") + `data: {"usage":` + usageOf(1, 1) + "}"},
	{name: "sse data line over the cap loses the usage", body: sseChunk("a", usageOf(4, 1)) +
		sseChunk(strings.Repeat("x", sseLineLimit), usageOf(4, 2)) + sseDone},
	{name: "sse data line over the cap before the usage", body: sseChunk(strings.Repeat("x", sseLineLimit), "null") +
		sseChunk("b", usageOf(4, 2)) + sseDone, want: Tokens{Prompt: 4, Completion: 2, Known: true}},
	{name: "sse data line over the cap cut by the end forgets nothing", body: sseChunk("a", usageOf(4, 1)) +
		"data: " + strings.Repeat("x", sseLineLimit), want: Tokens{Prompt: 4, Completion: 1, Known: true}},
	{name: "sse comment over the cap is harmless", body: sseChunk("a", usageOf(4, 1)) + ": " + strings.Repeat("x", sseLineLimit) + "\n\n" + sseDone,
		want: Tokens{Prompt: 4, Completion: 1, Known: true}},
	{name: "sse line of exactly the cap is read", body: `data: {"usage":` + usageOf(6, 6) + "," +
		`"pad":"` + strings.Repeat("x", sseLineLimit-len(`data: {"usage":`+usageOf(6, 6)+`,"pad":""}`)) + `"}` + "\n\n",
		want: Tokens{Prompt: 6, Completion: 6, Known: true}},
	{name: "sse malformed usage chunk forgets the usage", body: sseChunk("a", usageOf(4, 1)) + `data: {"usage":{"prompt_tokens":4,` + "\n\n" + sseDone},
	{name: "sse usage not an object", body: sseChunk("a", usageOf(4, 1)) + sseChunk("b", `"many"`) + sseDone},
	{name: "sse negative count", body: sseChunk("a", `{"prompt_tokens":-1,"completion_tokens":3}`) + sseDone},
	{name: "sse content type with charset", contentType: "Text/Event-Stream; charset=utf-8", body: sseChunk("a", usageOf(1, 2)),
		want: Tokens{Prompt: 1, Completion: 2, Known: true}},

	{name: "json usage", contentType: jsonType, body: `{"id":"cmpl-1","object":"text_completion","choices":[{"text":"hi"}],"usage":` +
		usageOf(10, 20) + `}`, want: Tokens{Prompt: 10, Completion: 20, Known: true}},
	{name: "json embeddings usage without completion_tokens", contentType: jsonType,
		body: `{"data":[{"embedding":[0.1]}],"usage":{"prompt_tokens":9,"total_tokens":9}}`, want: Tokens{Prompt: 9, Completion: 0, Known: true}},
	{name: "json no usage", contentType: jsonType, body: `{"id":"x","choices":[]}`},
	{name: "json usage null", contentType: jsonType, body: `{"id":"x","usage":null}`},
	{name: "json malformed", contentType: jsonType, body: `{"usage":` + usageOf(1, 1)},
	{name: "json trailing garbage", contentType: jsonType, body: `{"usage":` + usageOf(1, 1) + `} x`},
	{name: "json over the cap", contentType: jsonType, body: `{"pad":"` + strings.Repeat("x", jsonBodyLimit) + `","usage":` + usageOf(1, 1) + `}`},
	{name: "json content type with charset", contentType: "application/json; charset=utf-8", body: `{"usage":` + usageOf(3, 4) + `}`,
		want: Tokens{Prompt: 3, Completion: 4, Known: true}},

	// The Responses API (/v1/responses): input_tokens and output_tokens; in a
	// stream, the usage of the response.completed event's response object.
	{name: "responses json", contentType: jsonType, body: `{"id":"resp_1","object":"response","status":"completed",` +
		`"output":[],"usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"total_tokens":16}}`,
		want: Tokens{Prompt: 11, Completion: 5, Known: true}},
	{name: "responses stream", body: "event: response.created\n" +
		`data: {"type":"response.created","response":{"id":"resp_1","status":"in_progress","usage":null}}` + "\n\n" +
		"event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","delta":"hi"}` + "\n\n" +
		"event: response.completed\n" +
		`data: {"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":7,"output_tokens":2,"total_tokens":9}}}` + "\n\n",
		want: Tokens{Prompt: 7, Completion: 2, Known: true}},
	{name: "a usage deeper than response's is not read", contentType: jsonType,
		body: `{"output":[{"usage":{"input_tokens":1}}],"response":{"meta":{"usage":{"input_tokens":2}}}}`},

	{name: "gzip is not decoded", encoding: "gzip", body: sseChunk("a", usageOf(1, 1))},
	{name: "identity encoding is read", encoding: "identity", body: sseChunk("a", usageOf(1, 1)), want: Tokens{Prompt: 1, Completion: 1, Known: true}},
	{name: "other content type is unknown", contentType: "text/plain", body: sseChunk("a", usageOf(1, 1))},
	{name: "non-200 reports nothing", status: 400, body: sseChunk("a", usageOf(1, 1))},
	{name: "201 reports nothing", status: 201, contentType: jsonType, body: `{"usage":` + usageOf(1, 1) + `}`},
}

// TestUsageScanner reads each body through Watch in reads of several
// sizes, with and without EOF on the last data, and checks that the bytes
// pass unchanged and the usage is reported exactly once.
func TestUsageScanner(t *testing.T) {
	for _, tt := range usageCases {
		for _, n := range []int{1, 3, 7, 4096} {
			for _, dataErr := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/read%d/dataerr=%v", tt.name, n, dataErr), func(t *testing.T) {
					if n < 7 && len(tt.body) > 256<<10 {
						t.Skip("large body: covered by reads of 7 and 4096")
					}
					var src io.Reader = &chunkReader{data: []byte(tt.body), n: n}
					if dataErr {
						src = iotest.DataErrReader(src)
					}
					res := usageResponse(tt.status, tt.contentType, tt.encoding, io.NopCloser(src))
					var got []Tokens
					watch(res, func(u Tokens) { got = append(got, u) })
					out, err := io.ReadAll(res.Body)
					if err != nil || !bytes.Equal(out, []byte(tt.body)) {
						t.Fatalf("body through the scanner = %d bytes, %v; want the %d bytes unchanged", len(out), err, len(tt.body))
					}
					res.Body.Close()
					reported := tt.status == 0 || tt.status == 200
					switch {
					case !reported && len(got) != 0:
						t.Fatalf("reported %v for status %d, want nothing", got, tt.status)
					case reported && (len(got) != 1 || got[0] != tt.want):
						t.Fatalf("reported %v, want [%v]", got, tt.want)
					}
				})
			}
		}
	}
}

func usageResponse(status int, contentType, encoding string, body io.ReadCloser) *http.Response {
	if status == 0 {
		status = 200
	}
	if contentType == "" {
		contentType = sseType
	}
	h := http.Header{"Content-Type": {contentType}}
	if encoding != "" {
		h.Set("Content-Encoding", encoding)
	}
	return &http.Response{StatusCode: status, Header: h, Body: body, ContentLength: -1}
}

// TestUsageReportedOnClose: a body closed before EOF reports the SSE usage
// seen so far (the tokens were spent), and a JSON body as unknown.
func TestUsageReportedOnClose(t *testing.T) {
	tests := []struct {
		name, contentType, body string
		want                    Tokens
	}{
		{"sse", sseType, sseChunk("a", usageOf(3, 1)) + sseChunk("b", usageOf(3, 2)), Tokens{Prompt: 3, Completion: 2, Known: true}},
		{"json", jsonType, `{"usage":` + usageOf(1, 1) + `}`, Tokens{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := usageResponse(200, tt.contentType, "", io.NopCloser(strings.NewReader(tt.body+"more")))
			var got []Tokens
			watch(res, func(u Tokens) { got = append(got, u) })
			buf := make([]byte, len(tt.body))
			if _, err := io.ReadFull(res.Body, buf); err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			res.Body.Close()
			if len(got) != 1 || got[0] != tt.want {
				t.Fatalf("reported %v, want [%v]", got, tt.want)
			}
		})
	}
}

// TestUsageContentLengthOverCap: a JSON body announced larger than the cap
// is not buffered at all.
func TestUsageContentLengthOverCap(t *testing.T) {
	var s scanner
	s.init(formatJSON, jsonBodyLimit+1)
	s.write([]byte(`{"usage":` + usageOf(1, 1) + `}`))
	if u := s.result(true); u.Known || s.buf != nil {
		t.Fatalf("result = %v with %d bytes held, want unknown and nothing held", u, len(s.buf))
	}
}

// BenchmarkUsageScanner reads a 200-chunk stream with usage on every chunk
// (continuous_usage_stats, the most parsing) through the body wrapper, in
// reads of one chunk as the reverse proxy sees them.
func BenchmarkUsageScanner(b *testing.B) {
	for _, every := range []bool{false, true} {
		var stream bytes.Buffer
		for i := range 200 {
			u := "null"
			if every || i == 199 {
				u = usageOf(512, int64(i+1))
			}
			stream.WriteString(sseChunk("token", u))
		}
		stream.WriteString(sseDone)
		data := stream.Bytes()
		chunk := len(sseChunk("token", usageOf(512, 100)))
		b.Run(fmt.Sprintf("usage_every_chunk=%v", every), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			buf := make([]byte, 32<<10)
			for b.Loop() {
				res := usageResponse(200, sseType, "", io.NopCloser(&chunkReader{data: data, n: chunk}))
				var got Tokens
				watch(res, func(u Tokens) { got = u })
				for {
					if _, err := res.Body.Read(buf); err != nil {
						break
					}
				}
				res.Body.Close()
				if got != (Tokens{Prompt: 512, Completion: 200, Known: true}) {
					b.Fatalf("usage = %v", got)
				}
			}
		})
	}
}

// TestJSONBufferPooled: once the pool is warm, reading a JSON body's usage
// allocates nothing; a body read after another reuses its buffer and reads
// its own usage; a released scanner reads nothing more.
func TestJSONBufferPooled(t *testing.T) {
	data := []byte(vllmChatResponse)
	want := Tokens{Prompt: 25, Completion: 27, Known: true}
	var s scanner
	read := func(body []byte) Tokens {
		s.init(formatJSON, int64(len(body)))
		s.write(body[:7])
		s.write(body[7:])
		u := s.result(true)
		s.release()
		return u
	}
	if n := testing.AllocsPerRun(100, func() { read(data) }); n != 0 {
		t.Errorf("reading a JSON body's usage allocates %v times, want 0", n)
	}
	other := []byte(`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`)
	if got := read(other); got != (Tokens{Prompt: 1, Completion: 2, Known: true}) {
		t.Fatalf("usage of a short body after a long one = %v", got)
	}
	if got := read(data); got != want {
		t.Fatalf("usage = %v, want %v", got, want)
	}
	s.write(data)
	if got := s.result(true); got != (Tokens{}) || s.buf != nil {
		t.Fatalf("a released scanner reads %v and holds %d bytes, want nothing", got, len(s.buf))
	}
}
