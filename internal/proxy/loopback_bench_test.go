package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
)

// loopbackPod answers a completion at once: JSON with a Content-Length, or
// an SSE stream of eight flushed events when the body asks for one.
func loopbackPod(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !strings.Contains(string(body), `"stream":true`) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"text_completion","choices":[{"text":" hi"}],"usage":{"total_tokens":5}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for range 8 {
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\" tok\"}]}\n\n")
		_ = rc.Flush()
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// BenchmarkLoopback is one completion from a client through the Handler to a
// pod, both over real loopback TCP with the Handler's own transport: unlike
// BenchmarkServeHTTP it sees the writes, flushes and timers of the proxying
// itself (bench/run measures the same path under load). The client
// connections come from a SendListener, as cmd/gatekeeper's do (without
// framing.Guard's scanning). The send_timeout case is the stream with
// server.send_timeout's default, which moves the client connection's write
// deadline at every socket write. The gateway_overloaded case is a request
// that server.overload sheds: its 503 beside the json case is what a shed
// request saves. The /h2c cases are the same over plaintext HTTP/2
// (server.h2c), the client's requests multiplexed on its connections; there
// send_timeout bounds each write through the stream's write deadline.
func BenchmarkLoopback(b *testing.B) {
	const stream = `{"model":"m","prompt":"Say hello","max_tokens":16,"stream":true}`
	for _, tt := range []struct {
		name        string
		body        string
		sendTimeout time.Duration
		status      int
		h2c         bool
	}{
		{"json", `{"model":"m","prompt":"Say hello","max_tokens":16}`, 0, http.StatusOK, false},
		{"json/h2c", `{"model":"m","prompt":"Say hello","max_tokens":16}`, 0, http.StatusOK, true},
		{"stream", stream, 0, http.StatusOK, false},
		{"stream/h2c", stream, 0, http.StatusOK, true},
		{"stream+send_timeout", stream, time.Minute, http.StatusOK, false},
		{"stream+send_timeout/h2c", stream, time.Minute, http.StatusOK, true},
		{"gateway_overloaded", `{"model":"m","prompt":"Say hello","max_tokens":16}`, 0, http.StatusServiceUnavailable, false},
	} {
		b.Run(tt.name, func(b *testing.B) {
			var inflight, most atomic.Int64 // the pod's requests in its handler, streams included
			pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := inflight.Add(1)
				defer inflight.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				loopbackPod(w, r)
			}))
			b.Cleanup(pod.Close)
			u, _ := url.Parse(pod.URL)
			var writes atomic.Int64 // socket writes by the Handler, to client and pod
			rt := NewTransport(TransportSettings{})
			dial := rt.DialContext
			rt.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dial(ctx, network, addr)
				return countingConn{c, &writes}, err
			}
			h, err := newHandler(testOptions{
				Upstreams:    []pods.Pod{{Name: "pod", URL: u}},
				Admission:    newFakeAdmission(1<<16, "pod"),
				RoundTripper: rt,
				Policy:       decide.Policy{SendTimeout: tt.sendTimeout},
				Extra: func(o *Options) {
					if tt.status == http.StatusServiceUnavailable {
						o.Overload = &fakeOverload{room: false}
					}
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			gk := httptest.NewUnstartedServer(h)
			gk.Listener = SendListener(countingListener{gk.Listener, &writes})
			gk.Config.ConnContext = ConnContext
			tr := &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}
			if tt.h2c { // as cmd/gatekeeper's listener.Protocols(true), and a client of HTTP/2 alone
				gk.Config.Protocols, tr.Protocols = new(http.Protocols), new(http.Protocols)
				gk.Config.Protocols.SetHTTP1(true)
				gk.Config.Protocols.SetUnencryptedHTTP2(true)
				tr.Protocols.SetUnencryptedHTTP2(true)
			}
			gk.Start()
			b.Cleanup(gk.Close)
			b.Cleanup(tr.CloseIdleConnections)
			client := &http.Client{Transport: tr}
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			writes.Store(0)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(gk.URL+"/v1/completions", "application/json", strings.NewReader(tt.body))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != tt.status || tt.h2c != (resp.ProtoMajor == 2) {
						b.Errorf("status %d over %s", resp.StatusCode, resp.Proto)
						return
					}
				}
			})
			// CPU time (user + system, the whole process: client, Handler
			// and pod) is steadier than wall time on a shared machine.
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			// Socket writes are what a flush costs: one system call each.
			b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/op")
			// The most requests the pod held at once: the client's
			// parallelism reaches the pod through the Handler unchanged.
			b.ReportMetric(float64(most.Load()), "pod-max-inflight")
		})
	}
}

// countingListener and countingConn count the Write calls on the Handler's
// sockets.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// SyscallConn is the socket's, so that the pod transport's idle check
// (a read of the socket) runs here as it does unwrapped.
func (c countingConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
