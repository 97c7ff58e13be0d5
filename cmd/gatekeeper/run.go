package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/listener"
	"github.com/gatekeeper-dev/gatekeeper/internal/policy"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/framing"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/tlscert"
)

// run loads the policy at path ("" for the embedded default) and serves
// until ctx ends or SIGTERM/SIGINT arrives, then drains (docs/operations.md,
// Shutdown). command parsed the flags.
func run(ctx context.Context, path string, stderr io.Writer) error {
	cfg, err := policy.LoadRunnable(path, pressure.NVMLCompiled)
	if err != nil {
		return err
	}
	level := new(slog.LevelVar)
	level.Set(cfg.Log.Level.Slog())
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	a, err := newApp(cfg, appOptions{log: log, level: level, path: path, getenv: os.Getenv})
	if err != nil {
		return err
	}
	defer a.close()
	return a.serve(ctx, hup)
}

func displayName(path string) string {
	if path == "" {
		return "embedded default policy"
	}
	return path
}

// serve runs the listeners and background loops until ctx ends, then drains.
func (a *app) serve(ctx context.Context, hup <-chan os.Signal) error {
	addr, key := a.cfg().Server.Listen, "server.listen"
	if e := a.cfg().EndpointPicker; e != nil { // the gRPC listener replaces the traffic listener
		addr, key = e.Listen, "endpoint_picker.listen"
	}
	traffic, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("gatekeeper: %s: %w", key, err)
	}
	admin, err := net.Listen("tcp", a.cfg().Server.AdminListen)
	if err != nil {
		traffic.Close()
		return fmt.Errorf("gatekeeper: server.admin_listen: %w", err)
	}
	return a.serveOn(ctx, traffic, admin, hup)
}

// serveOn is serve on listeners the caller opened (tests pass loopback
// ones). In endpoint-picker mode traffic is the gRPC listener. The loops
// and the listeners' Serve goroutines run under one WaitGroup, which the
// shutdown waits on.
func (a *app) serveOn(ctx context.Context, traffic, admin net.Listener, hup <-chan os.Signal) error {
	as := a.adminServer()
	loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	fail := func(err error) error {
		stopLoops()
		wg.Wait()
		traffic.Close()
		admin.Close()
		return err
	}
	wg.Go(func() { _ = a.health.Run(loops) })
	wg.Go(func() { a.policy.Watch(loops, hup) })
	if err := a.startLoops(loops, &wg); err != nil {
		return fail(err)
	}
	if a.cfg().EndpointPicker != nil { // no HTTP front: the picker serves traffic
		return a.runPicker(ctx, traffic, admin, as, stopLoops, &wg)
	}
	ts := a.trafficServer()
	useTLS, err := a.configureTLS(ts)
	if err != nil {
		return fail(err)
	}
	a.handler.ReturnConnsTo(ts) // a stream's connection, handed off, comes back after it
	traffic = a.bound(ctx, traffic)
	errc := make(chan error, 2)
	wg.Go(func() { errc <- a.serveTraffic(ts, traffic, useTLS) })
	wg.Go(func() { errc <- serveErr(as.Serve(admin)) })
	a.log.LogAttrs(ctx, slog.LevelInfo, "gatekeeper started",
		slog.String("state", "serving"), slog.String("listen", traffic.Addr().String()),
		slog.String("admin_listen", admin.Addr().String()), slog.String("version", version))
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	a.drain(nil, shutdownHTTP(ts, a.handler.WaitStreams))
	_ = as.Close()
	stopLoops()
	wg.Wait()
	a.log.LogAttrs(context.Background(), slog.LevelInfo, "gatekeeper stopped", slog.String("state", "stopped"))
	return err
}

// trafficServer is the HTTP front's server for the running policy.
func (a *app) trafficServer() *http.Server {
	s := a.cfg().Server
	return &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: s.ReadHeaderTimeout,
		IdleTimeout:       s.IdleTimeout,
		MaxHeaderBytes:    s.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
		ConnContext:       proxy.ConnContext, // framing.Guard's verdict, proxy.SendListener's connection
		ConnState:         a.conns.Track,     // gatekeeper_client_connections
		// No WriteTimeout: streams last minutes. A client that stops reading is cut by
		// server.send_timeout, when it has taken no byte for that long (proxy.SendListener).
		Protocols: listener.Protocols(s.H2C),
		HTTP2:     listener.HTTP2(s.MaxConcurrentStreams, s.SendTimeout),
	}
}

// adminServer is the admin listener's server, in either mode.
func (a *app) adminServer() *http.Server {
	return &http.Server{Handler: a.adminHandler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
}

// bound puts the traffic listener's bounds on l: server.max_connections
// and the send timeout, under TLS and framing.Guard alike.
func (a *app) bound(ctx context.Context, l net.Listener) net.Listener {
	s := a.cfg().Server
	l = listener.Limit(l, s.MaxConnections)
	l = proxy.SendListener(l) // the send timeout in each connection, under TLS too
	if limit, low := listener.FileLimitLow(s.MaxConnections); low {
		a.log.LogAttrs(ctx, slog.LevelWarn, "open-file limit (ulimit -n) is below server.max_connections + 1024",
			slog.Uint64("open_file_limit", limit), slog.Int("max_connections", s.MaxConnections))
	}
	return l
}

// serveTraffic serves ts on l until it is shut down.
func (a *app) serveTraffic(ts *http.Server, l net.Listener, useTLS bool) error {
	if useTLS {
		return serveErr(ts.ServeTLS(l, "", ""))
	}
	return serveErr(ts.Serve(framing.Guard(l))) // TLS bytes cannot be scanned
}

func serveErr(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("gatekeeper: serve: %w", err)
}

// drain is DESIGN §7's shutdown, for either front: readiness turns 503
// (NOT_SERVING) at once, traffic keeps flowing for drain_delay so load
// balancers notice, then new work and the queue get 503 draining, and
// in-flight streams have shutdown_timeout to end (shutdown closes what is
// left when its context ends). Both steps are the decision core's, which
// either front and the admin listener read. begin, if set, is the front's
// own first step.
func (a *app) drain(begin func(), shutdown func(ctx context.Context) error) {
	s := a.cfg().Server
	a.core.StartDrain()
	if begin != nil {
		begin()
	}
	a.log.LogAttrs(context.Background(), slog.LevelInfo, "draining",
		slog.String("state", "draining"), slog.Float64("duration_s", s.DrainDelay.Seconds()))
	a.step("draining")
	if s.DrainDelay > 0 {
		t := time.NewTimer(s.DrainDelay) // load balancers poll in real time
		<-t.C
	}
	a.core.Drain()
	a.queue.Drain(errDrainingQueue)
	a.step("refusing")
	ctx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		a.log.LogAttrs(ctx, slog.LevelWarn, "shutdown timeout: closing remaining streams",
			slog.String("state", "closing"), slog.String("err", err.Error()))
	}
}

// shutdownHTTP ends ts gracefully until ctx ends, then at once; and the
// streams handed off ts's connections (waitStreams: Shutdown does not wait
// for hijacked connections) likewise.
func shutdownHTTP(ts *http.Server, waitStreams func(context.Context) error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		err := ts.Shutdown(ctx)
		if err != nil {
			_ = ts.Close()
		}
		return errors.Join(err, waitStreams(ctx))
	}
}

// configureTLS makes ts serve TLS with HTTP/2 and HTTP/1.1 when the policy
// asks for it (trafficServer set HTTP/2's bounds). The certificate is
// re-read when its files change (tlscert.Loader).
func (a *app) configureTLS(ts *http.Server) (bool, error) {
	s := a.cfg().Server
	if s.TLS == nil {
		return false, nil
	}
	l, err := tlscert.New(tlscert.Settings{CertFile: s.TLS.CertFile, KeyFile: s.TLS.KeyFile, Logger: a.log})
	if err != nil {
		return false, fmt.Errorf("gatekeeper: server.tls: %w", err)
	}
	ts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: l.GetCertificate}
	return true, nil
}
