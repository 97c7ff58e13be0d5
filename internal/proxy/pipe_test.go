package proxy

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/framing"
	"github.com/prometheus/client_golang/prometheus"
)

// pipeListener hands out the server ends of in-memory connections
// (net.Pipe), so that a real http.Server runs inside a synctest bubble,
// where deadlines and the clock are the bubble's. Create one with
// newPipeListener.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial connects a client: the server end goes to Accept.
func (l *pipeListener) dial(t *testing.T) net.Conn {
	t.Helper()
	client, server := net.Pipe()
	select {
	case l.conns <- server:
	case <-l.done:
		t.Fatal("dial on a closed listener")
	}
	t.Cleanup(func() { client.Close() })
	return client
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// newPipeProxy is newTestProxy inside a synctest bubble: the Handler, served
// by an http.Server set up as cmd/gatekeeper sets it up, over a
// pipeListener, in front of one pod that rt answers for. Call it inside
// the bubble; the server is closed when the test ends.
func newPipeProxy(t *testing.T, rt http.RoundTripper, mutate func(*testOptions)) (*testProxy, *pipeListener) {
	t.Helper()
	u, _ := url.Parse("http://pod-0.invalid:8000")
	tp := &testProxy{reg: prometheus.NewRegistry(), adm: newFakeAdmission(1, "pod-0"), levels: &fakeLevels{}, gate: &recordingGate{}}
	opts := testOptions{
		Upstreams:    []pods.Pod{{Name: "pod-0", URL: u, Gate: tp.gate}},
		Admission:    tp.adm,
		Levels:       tp.levels,
		Metrics:      NewMetrics(tp.reg),
		RoundTripper: rt,
	}
	if mutate != nil {
		mutate(&opts)
	}
	h, err := newHandler(opts)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	tp.h = h
	l := newPipeListener()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnContext: ConnContext}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(framing.Guard(SendListener(l))) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve() = %v", err)
		}
	})
	return tp, l
}
