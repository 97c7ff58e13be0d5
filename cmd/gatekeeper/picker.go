package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/epp"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/tlscert"
)

// picker is the endpoint-picker front: the ext_proc server over the same
// decision core the proxy asks, on its own gRPC server.
type picker struct {
	srv    *epp.Server
	gs     *grpc.Server
	health *grpc.Server // plaintext health for kubelet; nil with health_listen: off
}

// newPicker builds the endpoint picker for the running policy.
func (a *app) newPicker() (*picker, error) {
	// Readiness, the cluster condition and the drain included, is the core's.
	e := a.cfg().EndpointPicker
	co := epp.CoreOptions{Core: a.core, Recorder: a.reqMetrics, Logger: a.log, Fallbacks: e.Fallbacks, Scores: e.Scores}
	so := epp.Options{Logger: a.log, Recorder: a.reqMetrics}
	a.pickerTraceOptions(a.cfg(), &so, &co)
	so.Decider = epp.NewCoreDecider(co)
	srv, err := epp.NewServer(so)
	if err != nil {
		return nil, err
	}
	opts := epp.ServerOptions()
	if t := a.cfg().EndpointPicker.TLS; t != nil {
		l, err := tlscert.New(tlscert.Settings{CertFile: t.CertFile, KeyFile: t.KeyFile, Logger: a.log})
		if err != nil {
			return nil, fmt.Errorf("gatekeeper: endpoint_picker.tls: %w", err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: l.GetCertificate,
			NextProtos: []string{"h2"}})))
	}
	gs := grpc.NewServer(opts...)
	srv.Register(gs)
	p := &picker{srv: srv, gs: gs}
	if a.cfg().EndpointPicker.HealthListen != config.PickerHealthOff {
		p.health = grpc.NewServer()
		srv.RegisterHealth(p.health)
	}
	return p, nil
}

// servePicker serves the picker on lis until ctx ends, then drains it as
// the proxy drains (a.drain). Its Serve goroutines run under wg, which
// the caller waits on; the health server stops after the drain (probes see
// NOT_SERVING until the end).
func (a *app) servePicker(ctx context.Context, lis net.Listener, p *picker, wg *sync.WaitGroup) error {
	errc := make(chan error, 2)
	if p.health != nil {
		hl, err := net.Listen("tcp", a.cfg().EndpointPicker.HealthListen)
		if err != nil {
			lis.Close()
			return fmt.Errorf("gatekeeper: endpoint_picker.health_listen: %w", err)
		}
		a.pickerHealthAddr.Store(hl.Addr().String())
		wg.Go(func() { errc <- p.health.Serve(hl) })
		defer p.health.Stop()
	}
	wg.Go(func() { errc <- p.gs.Serve(lis) })
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		if err != nil {
			err = fmt.Errorf("gatekeeper: endpoint picker: %w", err)
		}
	}
	a.drain(p.srv.Drain, func(ctx context.Context) error { return p.srv.Shutdown(ctx, p.gs) })
	return err
}

// runPicker is serveOn's endpoint-picker half: the admin listener and the
// picker on lis until ctx ends (or either fails), then the drain, the
// loops' end. It closes what it was handed.
func (a *app) runPicker(ctx context.Context, lis, admin net.Listener, as *http.Server, stopLoops func(), wg *sync.WaitGroup) error {
	p, err := a.newPicker()
	if err != nil {
		lis.Close()
		admin.Close()
		stopLoops()
		wg.Wait()
		return err
	}
	adminErr := make(chan error, 1)
	wg.Go(func() { adminErr <- serveErr(as.Serve(admin)) })
	a.log.LogAttrs(ctx, slog.LevelInfo, "gatekeeper started", slog.String("state", "serving"),
		slog.String("mode", "endpoint_picker"), slog.String("listen", lis.Addr().String()),
		slog.String("admin_listen", admin.Addr().String()), slog.String("version", version))
	pctx, cancel := context.WithCancel(ctx)
	var aerr error
	watched := make(chan struct{})
	wg.Go(func() { // the admin listener failing ends the picker too
		defer close(watched)
		select {
		case aerr = <-adminErr:
			cancel()
		case <-pctx.Done():
		}
	})
	err = a.servePicker(pctx, lis, p, wg)
	cancel()
	<-watched
	_ = as.Close()
	stopLoops()
	wg.Wait()
	a.log.LogAttrs(context.Background(), slog.LevelInfo, "gatekeeper stopped", slog.String("state", "stopped"))
	return errors.Join(err, aerr)
}
