// Package usage reads the token usage that a pod reports in its response
// (the "usage" object of a JSON body or of an SSE data chunk) while the body
// streams through to the client unchanged. Watch wraps a response body and
// reports its Tokens once, at the end; package proxy turns them into metrics.
// Scanner applies the same rules to a body that arrives as chunks (package
// epp sees a response only as Envoy's body messages).
package usage

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Bounds on what the usage scanner keeps of one response. A longer SSE line
// or JSON body is passed on untouched but its usage is lost (unknown).
const (
	sseLineLimit  = 64 << 10
	jsonBodyLimit = 1 << 20
)

// usageKey is in every document that has a usage: the rest need no
// decoding. (A key spelled with JSON escapes, which no pod sends, is missed.)
const usageKey = `"usage"`

// Tokens is the token count a pod reported for one response. The zero value
// is an unknown usage.
type Tokens struct {
	// Prompt and Completion are the usage's prompt_tokens and
	// completion_tokens (input_tokens and output_tokens in the Responses
	// API); a missing or null count is 0 (embeddings have no completions).
	Prompt, Completion int64
	// Known is false when the usage could not be read: absent, too large,
	// compressed or malformed.
	Known bool
	// StreamError is true when an SSE data event carried a top-level
	// "error" object: the pod failed the request after its 200 (vLLM sends
	// one when generation fails mid-stream).
	StreamError bool
}

// errorKey is in every SSE error event; like usageKey it spares the decode
// of every other chunk.
const errorKey = `"error"`

// usageFormat says how a response carries its usage.
type usageFormat uint8

const (
	formatNone usageFormat = iota // not readable: the usage is unknown
	formatSSE                     // text/event-stream: usage in a data chunk
	formatJSON                    // application/json: usage in the body
)

// formatOf picks the format from a 200 response's Content-Type and
// Content-Encoding. Compressed bodies are not decoded: gatekeeper passes
// them through as they are.
func formatOf(contentType, contentEncoding string) usageFormat {
	if contentEncoding != "" && !strings.EqualFold(contentEncoding, "identity") {
		return formatNone
	}
	ct, _, _ := strings.Cut(contentType, ";")
	switch ct = strings.TrimSpace(ct); {
	case strings.EqualFold(ct, "text/event-stream"):
		return formatSSE
	case strings.EqualFold(ct, "application/json"):
		return formatJSON
	}
	return formatNone
}

// Reporter receives the usage of one watched response body.
type Reporter interface {
	// ReportUsage is called once, on the goroutine that reads or closes the
	// body, at its EOF or Close.
	ReportUsage(Tokens)
}

// reportFunc adapts a function to a Reporter.
type reportFunc func(Tokens)

// ReportUsage calls f(t).
func (f reportFunc) ReportUsage(t Tokens) { f(t) }

// Body passes a pod's response body through unchanged while a scanner
// watches it, and reports its usage once, at EOF or Close. Closed before EOF
// (the client left, the stream broke), an SSE body reports the last Tokens
// seen, since those tokens were spent, and a JSON body unknown. Read and
// Close must not be called concurrently (ReverseProxy calls both from the
// handler's goroutine). It implements no io.WriterTo, so every byte goes
// through Read and each Read is flushed on at once.
//
// The zero value is ready for one Watch; a Body must not be copied or reused
// after it. A caller with a per-request struct embeds one there, which spares
// the allocation that the function Watch makes.
type Body struct {
	rc     io.ReadCloser
	scan   scanner
	eof    bool
	report Reporter // nil once called
}

// watch wraps the body of a 200 response so that report is called once with
// its usage, at EOF or Close (see Body for a body closed early); other
// responses are left alone. The wrapped body must not be read and closed
// concurrently, as ReverseProxy does not.
func watch(res *http.Response, report func(Tokens)) {
	if res.StatusCode != http.StatusOK {
		return
	}
	new(Body).Watch(res, reportFunc(report))
}

// Watch makes b res's body, as the function Watch does, when res is a 200
// response; other responses are left alone.
func (b *Body) Watch(res *http.Response, report Reporter) {
	if res.StatusCode != http.StatusOK {
		return
	}
	b.rc, b.report = res.Body, report
	b.scan.init(formatOf(res.Header.Get("Content-Type"), res.Header.Get("Content-Encoding")), res.ContentLength)
	res.Body = b
}

func (b *Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.scan.write(p[:n])
	}
	if err == io.EOF {
		b.eof = true
		b.finish()
	}
	return n, err
}

// Wait passes a wait for the body's next bytes through to the body it
// reads, where that has one (podconn's: see its Wait); else it returns.
func (b *Body) Wait() {
	if w, ok := b.rc.(interface{ Wait() }); ok {
		w.Wait()
	}
}

func (b *Body) Close() error {
	b.finish()
	return b.rc.Close()
}

func (b *Body) finish() {
	if b.report != nil {
		report := b.report
		b.report = nil
		u := b.scan.result(b.eof)
		b.scan.release()
		report.ReportUsage(u)
	}
}

// scanner reads the usage out of a response body fed to it in pieces
// of any size. It keeps at most limit bytes: one partial SSE line, or the
// JSON body. The zero value reads nothing; call init first.
//
// For SSE the last Tokens seen wins: vLLM sends it in the final chunk with
// stream_options.include_usage, and cumulatively in every chunk with
// continuous_usage_stats, so summing would overcount. A data line that was
// too long or unreadable may have held a later usage, so it forgets what came
// before it. Lines end in LF or CRLF (vLLM's framing); a partial last line at
// EOF is discarded, as the SSE spec discards an unterminated event.
type scanner struct {
	format   usageFormat
	limit    int
	buf      []byte  // SSE: the current partial line; JSON: the body so far
	skip     bool    // SSE: inside a line longer than limit, dropped to its end
	lostData bool    // SSE: the line being dropped is a data line
	over     bool    // JSON: the body is longer than limit
	last     Tokens  // SSE: the last usage seen
	failed   bool    // SSE: a data event was an error event
	box      *[]byte // JSON: the pooled box buf came from, nil if none
}

// jsonBufs pools the buffers that hold JSON bodies (as *[]byte, empty), so
// that reading a small response's usage allocates none once the pool is
// warm. A JSON body is held from its headers to its end only; SSE line
// buffers, held for a whole stream, are not pooled, so that a stream never
// keeps a body-sized buffer.
var jsonBufs = sync.Pool{New: func() any { return new([]byte) }}

// keepJSONBuf bounds the capacity of a buffer returned to jsonBufs: one large
// body must not leave the pool holding its size.
const keepJSONBuf = 16 << 10

// init prepares s for a body of format; size is its Content-Length, -1 if
// unknown.
func (s *scanner) init(f usageFormat, size int64) {
	s.format = f
	switch f {
	case formatSSE:
		s.limit = sseLineLimit
	case formatJSON:
		s.limit = jsonBodyLimit
		if size > int64(s.limit) {
			s.over = true
		} else if size > 0 {
			s.grow(int(size))
		}
	}
}

func (s *scanner) write(p []byte) {
	switch s.format {
	case formatSSE:
		s.writeSSE(p)
	case formatJSON:
		if !s.over && !s.hold(p) {
			s.over = true
			s.dropBuf()
		}
	}
}

// result is the usage read so far; eof says whether the body was read to its
// end, without which a JSON body is incomplete.
func (s *scanner) result(eof bool) Tokens {
	switch s.format {
	case formatSSE:
		t := s.last
		t.StreamError = s.failed
		return t
	case formatJSON:
		if eof && !s.over && bytes.Contains(s.buf, []byte(usageKey)) {
			u, _ := parseUsage(s.buf)
			return u
		}
	}
	return Tokens{}
}

func (s *scanner) writeSSE(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if !s.skip && !s.hold(p) {
				s.skip, s.lostData = true, hasPrefix2(s.buf, p, "data:")
				s.buf = s.buf[:0]
			}
			return
		}
		line := p[:i]
		p = p[i+1:]
		switch {
		case s.skip: // the end of a line too long to keep
			s.skip = false
			s.lost(s.lostData)
		case len(s.buf) == 0 && len(line) <= s.limit:
			s.line(line) // the whole line is in p: no copy
		case s.hold(line):
			s.line(s.buf)
			s.buf = s.buf[:0]
		default:
			s.lost(hasPrefix2(s.buf, line, "data:"))
			s.buf = s.buf[:0]
		}
	}
}

// hold appends p to buf unless that would pass limit, growing buf to at most
// limit; it reports whether p fitted.
func (s *scanner) hold(p []byte) bool {
	n := len(s.buf) + len(p)
	if n > s.limit {
		return false
	}
	if n > cap(s.buf) {
		s.grow(n)
	}
	s.buf = append(s.buf, p...)
	return true
}

// grow makes buf's capacity at least n (at most limit), keeping its bytes:
// a JSON body's first buffer comes from jsonBufs when one there is large
// enough and no larger than limit.
func (s *scanner) grow(n int) {
	if s.format == formatJSON && s.box == nil {
		s.box = jsonBufs.Get().(*[]byte)
		if b := *s.box; cap(b) >= n && cap(b) <= s.limit {
			s.buf = append(b, s.buf...)
			return
		}
	}
	c := max(2*cap(s.buf), n, 512)
	s.buf = append(make([]byte, 0, min(c, s.limit)), s.buf...)
}

// release ends s: a pooled JSON buffer goes back to jsonBufs (with buf in it
// when that is small enough) and s reads nothing more. The usage must have
// been read already.
func (s *scanner) release() {
	s.dropBuf()
	*s = scanner{}
}

// dropBuf lets go of buf, returning it to jsonBufs when it came from there.
func (s *scanner) dropBuf() {
	if s.box != nil {
		if cap(s.buf) <= keepJSONBuf {
			*s.box = s.buf[:0]
		}
		jsonBufs.Put(s.box)
		s.box = nil
	}
	s.buf = nil
}

// lost records the end of a line longer than limit: if it was a data line,
// it may have held a later usage, so the one seen before is forgotten. Only
// complete lines count, as in the SSE spec: an overlong line cut by the end
// of the body forgets nothing.
func (s *scanner) lost(data bool) {
	if data {
		s.last = Tokens{}
	}
}

// line handles one complete SSE line, its LF removed.
func (s *scanner) line(l []byte) {
	l = bytes.TrimSuffix(l, []byte("\r"))
	v, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return // comments, event names, ids, blank lines
	}
	v = bytes.TrimPrefix(v, []byte(" "))
	hasError, hasUsage := bytes.Contains(v, []byte(errorKey)), bytes.Contains(v, []byte(usageKey))
	if !hasError && !hasUsage {
		return // neither key in it: skip the JSON check (also [DONE])
	}
	d := readDoc(v)
	if hasError && d.has(fieldError) {
		s.failed = true
	}
	if !hasUsage {
		return
	}
	u, ok := d.usage()
	switch {
	case !ok:
		s.last = Tokens{} // unreadable: it may have held the latest usage
	case u.Known:
		s.last = u
	}
}

// hasPrefix2 reports whether a followed by b begins with prefix.
func hasPrefix2(a, b []byte, prefix string) bool {
	for i := range len(prefix) {
		var c byte
		switch {
		case i < len(a):
			c = a[i]
		case i-len(a) < len(b):
			c = b[i-len(a)]
		default:
			return false
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}
