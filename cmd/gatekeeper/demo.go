package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/sim/demo"
	"github.com/gatekeeper-dev/gatekeeper/sim/load"
	"github.com/gatekeeper-dev/gatekeeper/sim/server"
)

// runDemo is run for -demo: it opens the listeners, serves until ctx ends or
// SIGTERM/SIGINT arrives, then drains gatekeeper and stops the pod.
func runDemo(ctx context.Context, d demo.Flags, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	traffic, err := net.Listen("tcp", d.Listen)
	if err != nil {
		return fmt.Errorf("gatekeeper: -demo-listen: %w", err)
	}
	admin, err := net.Listen("tcp", d.AdminListen)
	if err != nil {
		traffic.Close()
		return fmt.Errorf("gatekeeper: -demo-admin-listen: %w", err)
	}
	pod, err := demo.PodByName(d.Pod)
	if err != nil { // validate has refused it already; runDemo's own callers may not have
		traffic.Close()
		admin.Close()
		return fmt.Errorf("gatekeeper: -demo-pod: %w", err)
	}
	opts := demoOptions{traffic: traffic, admin: admin, log: log, banner: stdout, drainDelay: time.Second, pod: pod}
	if d.Load {
		opts.load = &load.Settings{DocumentPromptLogprobs: pod.DocumentPromptLogprobs}
	}
	return serveDemo(ctx, opts)
}

// demoOptions are serveDemo's inputs; tests pass loopback listeners on
// ephemeral ports and hooks.
type demoOptions struct {
	traffic, admin net.Listener // required; serveDemo closes them
	sim            net.Listener // the pod's; nil opens 127.0.0.1:0
	pod            demo.Pod     // the simulated pod; the zero value means demo.Default
	log            *slog.Logger // nil discards
	banner         io.Writer    // receives the paste-ready curl lines; nil: none
	speed          float64      // sim speed; 0 means demo.Speed
	drainDelay     time.Duration
	// load, if set, runs the built-in traffic pattern (its URL, Model,
	// Logger and State are filled in).
	load *load.Settings
	// onPressure, if set, is called after the slow breaker has seen each
	// pressure poll round (tests wait on it for the first reading).
	onPressure func(pressure.State)
	// onLoadDone, if set, receives the load generator's final counts.
	onLoadDone func(load.Stats)
	// now is the clock of the pod's path (time at each level). Nil means
	// time.Now.
	now   func() time.Time
	watch *demo.Watch // set by newDemo
}

// serveDemo runs the simulated pod, gatekeeper in front of it and, when
// asked, the traffic pattern, until ctx ends; then it stops the load,
// drains gatekeeper like the normal path, and stops the pod.
func serveDemo(ctx context.Context, o demoOptions) error {
	a, pod, simLn, err := newDemo(&o)
	if err != nil {
		return err
	}
	defer a.close()
	simCtx, stopSim := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSim()
	var wg sync.WaitGroup
	simErr := make(chan error, 1)
	wg.Go(func() { simErr <- pod.Serve(simCtx, simLn) })
	defer wg.Wait()
	trafficURL := "http://" + o.traffic.Addr().String()
	demo.Announce(ctx, o.log, o.banner, o.pod, o.speed, "http://"+simLn.Addr().String(), trafficURL, "http://"+o.admin.Addr().String())
	if o.load != nil {
		ls := *o.load
		ls.URL, ls.Model, ls.Logger = trafficURL, demo.Model, o.log
		ls.State = func() []slog.Attr { return o.watch.Attrs(demoSummary(a)) }
		lg, err := load.New(ls)
		if err != nil {
			o.traffic.Close()
			o.admin.Close()
			stopSim()
			return err
		}
		loadCtx, stopLoad := context.WithCancel(ctx)
		defer stopLoad()
		wg.Go(func() {
			_ = lg.Run(loadCtx)
			if o.onLoadDone != nil {
				o.onLoadDone(lg.Stats())
			}
		})
	}
	err = a.serveOn(ctx, o.traffic, o.admin, nil)
	stopSim()
	if serr := <-simErr; serr != nil && err == nil {
		err = fmt.Errorf("gatekeeper: demo pod: %w", serr)
	}
	return err
}

// newDemo builds the demo's pod, its listener (unless o has one), its
// policy and the app in front of it; on error it closes o's listeners.
func newDemo(o *demoOptions) (*app, *server.Server, net.Listener, error) {
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	o.speed = cmp.Or(o.speed, demo.Speed)
	if o.pod.Name == "" {
		o.pod = demo.Default
	}
	simLn := o.sim
	if simLn == nil {
		var err error
		if simLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			o.traffic.Close()
			o.admin.Close()
			return nil, nil, nil, fmt.Errorf("gatekeeper: demo pod listener: %w", err)
		}
	}
	fail := func(err error) (*app, *server.Server, net.Listener, error) {
		o.traffic.Close()
		o.admin.Close()
		simLn.Close()
		return nil, nil, nil, err
	}
	pod, err := demo.NewPod(o.pod, o.speed, o.log)
	if err != nil {
		return fail(fmt.Errorf("gatekeeper: demo pod: %w", err))
	}
	cfg, err := config.Parse(demo.Policy("http://"+simLn.Addr().String(), o.traffic.Addr().String(), o.admin.Addr().String(), o.drainDelay))
	if err != nil {
		return fail(fmt.Errorf("gatekeeper: demo policy: %w", err))
	}
	var a *app // set before the app's loops start, so before stage runs
	o.watch = demo.NewWatch(o.log, o.onPressure, o.now)
	stage := func(name string) {
		if name == "pressure" {
			o.watch.Round(a.pressure.Snapshot(), demoSummary(a).Pod)
		}
	}
	if a, err = newApp(cfg, appOptions{log: o.log, stage: stage}); err != nil {
		return fail(err)
	}
	return a, pod, simLn, nil
}

// demoSummary is the demo upstream's slow-breaker state now, for the
// load generator's summary lines and the pod's path.
func demoSummary(a *app) demo.Summary {
	s := a.snapshot()
	sum := demo.Summary{Queue: s.Queue.Length, QueueOrder: s.Queue.Order}
	for _, u := range s.Upstreams {
		if u.Name == demo.Upstream {
			sum.Pod = &demo.PodSummary{Level: u.Level, Phase: u.Phase, Window: u.WindowLimit, InFlight: u.InFlight, Signals: u.Signals}
		}
	}
	return sum
}
