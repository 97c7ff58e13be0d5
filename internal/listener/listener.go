// Package listener holds the traffic listener's bounds (issue 16, "bounded
// under overload"): at most server.max_connections client connections at
// once, the open-file limit they need, and the gauge of those open; and
// the protocols its server speaks, with HTTP/2's bounds.
package listener

import (
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
)

// Limit returns l holding at most max connections at once; 0 means no
// limit and returns l itself. Beyond the limit Accept is not called, so new
// connections complete their TCP handshake in the kernel and wait in its
// accept backlog (net.core.somaxconn) until a held one closes; past the
// backlog the kernel drops their SYNs and clients retry. Close unblocks a
// waiting Accept. It sits under TLS and framing.Guard, so it counts TCP
// connections whatever is spoken on them.
func Limit(l net.Listener, max int) net.Listener {
	if max <= 0 {
		return l
	}
	return netutil.LimitListener(l, max) // golang.org/x/net: a semaphore around Accept, released once on Close
}

// fileReserve is the open files kept aside, besides one per client
// connection, for the upstream connections (a request running on a pod and
// the idle pool), the listeners and the policy file.
const fileReserve = 1024

// FileLimitLow reports the open-file limit when it is below max client
// connections plus FileReserve: then accepting fails with EMFILE (net/http
// retries, clients wait in the backlog) and so can dials to the pods, before
// max_connections is reached. False when max is 0 or the limit is unknown.
func FileLimitLow(max int) (uint64, bool) {
	var r syscall.Rlimit // the soft limit, which Go raises to the hard one at start
	if max <= 0 || syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return 0, false
	}
	return r.Cur, r.Cur < uint64(max)+fileReserve
}

// Conns is gatekeeper_client_connections: the traffic listener's open
// client connections. Create one with NewConns; safe for concurrent use.
type Conns struct{ open prometheus.Gauge }

// NewConns returns Conns registered on reg.
func NewConns(reg prometheus.Registerer) *Conns {
	c := &Conns{open: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gatekeeper_client_connections",
		Help: "Client connections the traffic listener holds now (at most server.max_connections).",
	})}
	reg.MustRegister(c.open)
	return c
}

// Track is http.Server.ConnState: every connection the server accepts passes
// through StateNew once and ends in StateClosed or StateHijacked once. A
// hijacked connection is still open (a stream handed off, proxy's
// Options.StreamHandoff): HandedOffClosed counts it closed, when it closes
// or when the server takes it again (StateNew counts it once more).
func (c *Conns) Track(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		c.open.Inc()
	case http.StateClosed:
		c.open.Dec()
	}
}

// HandedOffClosed counts closed a connection Track saw hijacked: it has
// closed, or it is served again and passes through StateNew anew.
func (c *Conns) HandedOffClosed() { c.open.Dec() }

// Protocols is what the traffic server speaks: nil (net/http's default,
// HTTP/1 and, over TLS, HTTP/2) unless h2c, which adds HTTP/2 with prior
// knowledge on a plain listener (Go's server tells it by its preface; the
// upgrade from HTTP/1.1 is not offered).
func Protocols(h2c bool) *http.Protocols {
	if !h2c {
		return nil
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// HTTP2 is the traffic server's HTTP/2 configuration, over TLS or h2c: at
// most maxStreams requests at once per connection, and a connection that
// takes no byte for sendTimeout (0: none) closed. The handler bounds each
// stream's writes by the same timeout, as HTTP/2's flow control is per
// stream; HTTP/1's bound is in the connection (proxy.SendListener).
func HTTP2(maxStreams int, sendTimeout time.Duration) *http.HTTP2Config {
	return &http.HTTP2Config{MaxConcurrentStreams: maxStreams, WriteByteTimeout: sendTimeout}
}
