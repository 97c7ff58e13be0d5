package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// h2cPod is a pod for the h2c tests. It counts its requests in flight from
// its handler's start to its end, so it never reads lower than the truth,
// and reports each request whose client left before the end.
type h2cPod struct {
	inflight, most atomic.Int64
	next           chan struct{} // a "stream" request's second event waits for it
	aborted        chan string   // the X-Test of each request cut short
}

func newH2CPod(t *testing.T) (*h2cPod, string) {
	p := &h2cPod{next: make(chan struct{}, 1), aborted: make(chan string, 4)}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/v1/chat/completions", p.serve)
	return p, newPodServer(t, mux)
}

// serve reports a request cut short once it has counted it out: a pod
// notices a client gone a moment after gatekeeper freed its slot, and the
// tests send the next request only after that, so that the window's check
// does not measure that moment.
func (p *h2cPod) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n := p.inflight.Add(1)
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	test, ctx := r.Header.Get("X-Test"), r.Context()
	p.answer(ctx, w, test)
	p.inflight.Add(-1)
	if ctx.Err() != nil {
		p.aborted <- test
	}
}

func (p *h2cPod) answer(ctx context.Context, w http.ResponseWriter, test string) {
	if test == "json" {
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}]}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	event := func(data string) bool {
		_, err := io.WriteString(w, "data: "+data+"\n\n")
		return err == nil && http.NewResponseController(w).Flush() == nil
	}
	event("one")
	switch test {
	case "stream":
		select {
		case <-p.next:
			event("two")
			event("[DONE]")
			return
		case <-ctx.Done():
		}
	case "hold":
		<-ctx.Done()
	case "flood": // far more than any flow-control window, as fast as it goes
		chunk := strings.Repeat("x", 16<<10)
		for i := 0; i < 4096 && event(chunk); i++ {
		}
	}
}

// h2cClient speaks HTTP/2 with prior knowledge and nothing else.
func h2cClient(t *testing.T) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// chat sends one chat request with X-Test: test; local, if set, gets the
// client address of the connection it went on.
func chat(ctx context.Context, c *http.Client, url, test string, local *string) (*http.Response, error) {
	if local != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) { *local = ci.Conn.LocalAddr().String() }})
	}
	// Indented, with a blank line: valid JSON, and an HTTP/1 header fold
	// ending a header block to a scanner that took HTTP/2's frames for HTTP/1.
	body := "{\n \"model\": \"m\",\n\n \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],\n \"stream\": true\n}\n"
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Test", test)
	return c.Do(req)
}

func readLine(t *testing.T, rd *bufio.Reader, want string) {
	t.Helper()
	if line, err := rd.ReadString('\n'); line != want+"\n" {
		t.Fatalf("read %q (%v), want %q", line, err, want)
	}
}

func waitAborted(t *testing.T, p *h2cPod, want string) {
	t.Helper()
	select {
	case got := <-p.aborted:
		if got != want {
			t.Fatalf("the pod saw %q cut short, want %q", got, want)
		}
	case <-time.After(10 * time.Second): // a bound, not a wait for state
		t.Fatalf("the pod never saw the %q request's client leave", want)
	}
}

// TestH2C: with server.h2c, plaintext HTTP/2 gets what testHTTP2Streams
// checks (a gateway's requests sharing one connection), the listener
// advertises max_concurrent_streams and closes a connection that stops
// within the preface, and HTTP/1.1 (with the framing guard) is served on the
// same port. Without it, HTTP/2's preface is answered 505.
func TestH2C(t *testing.T) {
	pod, podURL := newH2CPod(t)
	// A window of one slot: a request is served only once the one before it
	// gave its slot back, so a slot a cut stream kept would starve the next.
	r := startLifecycle(t, http2Policy(podURL, "h2c: true"), nil)

	testHTTP2Streams(t, &http2Rig{pod: pod, url: r.traffic, admin: r.admin, newClient: h2cClient,
		dial: func(t *testing.T) net.Conn { return dialH2C(t, r.traffic) }})

	t.Run("max_concurrent_streams is advertised", func(t *testing.T) {
		if got := serverSettings(t, r.traffic)[http2.SettingMaxConcurrentStreams]; got != 3 {
			t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want 3", got)
		}
	})

	t.Run("a connection that sends part of the preface and stops is closed at read_header_timeout", func(t *testing.T) {
		c, err := net.Dial("tcp", strings.TrimPrefix(r.traffic, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // a bound: the server closes it after 1 s
		_, _ = io.WriteString(c, http2.ClientPreface[:10])
		if got, err := io.ReadAll(c); err != nil { // net/http's HTTP/1 answer to a request it timed out reading, then EOF
			t.Errorf("read %q, then %v; want the connection closed", got, err)
		}
	})

	t.Run("HTTP/1.1 on the same port, framing guard and all", func(t *testing.T) {
		res, err := http.Post(r.traffic+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || res.ProtoMajor != 1 {
			t.Errorf("HTTP/1.1 request = %d over %s, want 200 over HTTP/1.1", res.StatusCode, res.Proto)
		}
		c, err := net.Dial("tcp", strings.TrimPrefix(r.traffic, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gk\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n")
		if res, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || res.StatusCode != 400 {
			t.Errorf("ambiguous framing = %v, %v; want 400", res, err)
		}
	})

	t.Run("without h2c the preface is answered 505", func(t *testing.T) {
		off := startLifecycle(t, "upstreams: [{name: p, url: '"+podURL+"'}]\nserver: {drain_delay: 0s}\n", nil)
		c, err := net.Dial("tcp", strings.TrimPrefix(off.traffic, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.WriteString(c, http2.ClientPreface)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 505 || res.Header.Get("X-Gatekeeper-Reason") != "bad_request" || !strings.Contains(string(body), "server.h2c") {
			t.Errorf("the preface without h2c = %d %q %s, want 505 bad_request naming server.h2c",
				res.StatusCode, res.Header.Get("X-Gatekeeper-Reason"), body)
		}
	})
}

func chatStatus(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	res, err := chat(context.Background(), c, url, "json", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// serverSettings opens an h2c connection and returns the server's first
// SETTINGS.
func serverSettings(t *testing.T, url string) map[http2.SettingID]uint32 {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			got := map[http2.SettingID]uint32{}
			_ = sf.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil })
			return got
		}
	}
}

// TestH2CDrains: an h2c stream in flight when SIGTERM comes ends whole,
// and the process then stops cleanly.
func TestH2CDrains(t *testing.T) {
	pod, podURL := newH2CPod(t)
	r := startLifecycle(t, "upstreams: [{name: p, url: '"+podURL+"'}]\nserver: {drain_delay: 0s, h2c: true, shutdown_timeout: 20s}\n",
		map[string]bool{"refusing": true})
	res, err := chat(context.Background(), h2cClient(t), r.traffic, "stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	rd := bufio.NewReader(res.Body)
	readLine(t, rd, "data: one")

	r.cancel() // what SIGTERM does through signal.NotifyContext
	r.waitStage(t, "refusing")
	r.acks <- struct{}{} // the server's shutdown starts
	pod.next <- struct{}{}
	if rest, err := io.ReadAll(rd); err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("the stream after SIGTERM ended with %q, %v; want [DONE] and no reset", rest, err)
	}
	r.waitStopped(t)
}
