package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
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
)

// demoFlags are the -demo command line flags.
type demoFlags struct {
	on          bool   // -demo
	load        bool   // -demo-load (implies -demo)
	listen      string // -demo-listen
	adminListen string // -demo-admin-listen
	pod         string // -demo-pod
}

// register declares the demo flags on fs.
func (d *demoFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&d.on, "demo", false, "run a simulated vLLM pod (A10G, Llama-3-8B, real time) behind gatekeeper on loopback, with a demo policy; no -config")
	fs.BoolVar(&d.load, "demo-load", false, "with the demo, send a built-in traffic pattern (2 QPS of mixed chats and long documents, a 4× burst, then a burst of documents only, repeating); implies -demo")
	fs.StringVar(&d.listen, "demo-listen", "127.0.0.1:8080", "demo traffic `address` (the OpenAI API, /healthz, /readyz)")
	fs.StringVar(&d.adminListen, "demo-admin-listen", "127.0.0.1:9090", "demo admin `address` (/metrics, /admin/state)")
	usage := "the demo's simulated `pod`:"
	for _, p := range demo.Pods() {
		usage += fmt.Sprintf("\n%s: %s", p.Name, p.About)
	}
	fs.StringVar(&d.pod, "demo-pod", demo.Default.Name, usage)
}

// enabled reports whether the command line asks for the demo.
func (d demoFlags) enabled() bool { return d.on || d.load }

// validate refuses the flags the demo cannot honour: it builds its own
// policy, so a policy file or -check is a mistake; and a pod it does not
// have.
func (d demoFlags) validate(config string, check bool) error {
	if config != "" || check {
		return errors.New("gatekeeper: -demo builds its own policy; it takes no -config or -check (use -demo-listen, -demo-admin-listen)")
	}
	if _, err := demo.PodByName(d.pod); err != nil {
		return fmt.Errorf("gatekeeper: -demo-pod: %w", err)
	}
	return nil
}

// runDemo is run for -demo: it opens the listeners, serves until ctx ends or
// SIGTERM/SIGINT arrives, then drains gatekeeper and stops the pod.
func runDemo(ctx context.Context, d demoFlags, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	traffic, err := net.Listen("tcp", d.listen)
	if err != nil {
		return fmt.Errorf("gatekeeper: -demo-listen: %w", err)
	}
	admin, err := net.Listen("tcp", d.adminListen)
	if err != nil {
		traffic.Close()
		return fmt.Errorf("gatekeeper: -demo-admin-listen: %w", err)
	}
	pod, err := demo.PodByName(d.pod)
	if err != nil { // validate has refused it already; runDemo's own callers may not have
		traffic.Close()
		admin.Close()
		return fmt.Errorf("gatekeeper: -demo-pod: %w", err)
	}
	opts := demoOptions{traffic: traffic, admin: admin, log: log, banner: stdout, drainDelay: time.Second, pod: pod}
	if d.load {
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
	now func() time.Time
}

// serveDemo runs the simulated pod, gatekeeper in front of it and, when
// asked, the traffic pattern, until ctx ends; then it stops the load,
// drains gatekeeper like the normal path, and stops the pod.
func serveDemo(ctx context.Context, o demoOptions) error {
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	simLn := o.sim
	if simLn == nil {
		var err error
		if simLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			o.traffic.Close()
			o.admin.Close()
			return fmt.Errorf("gatekeeper: demo pod listener: %w", err)
		}
	}
	closeAll := func() { o.traffic.Close(); o.admin.Close(); simLn.Close() }
	speed := cmp.Or(o.speed, demo.Speed)
	if o.pod.Name == "" {
		o.pod = demo.Default
	}
	pod, err := demo.NewPod(o.pod, speed, o.log)
	if err != nil {
		closeAll()
		return fmt.Errorf("gatekeeper: demo pod: %w", err)
	}
	podURL := "http://" + simLn.Addr().String()
	cfg, err := config.Parse(demo.Policy(podURL, o.traffic.Addr().String(), o.admin.Addr().String(), o.drainDelay))
	if err != nil {
		closeAll()
		return fmt.Errorf("gatekeeper: demo policy: %w", err)
	}
	now := o.now
	if now == nil {
		now = time.Now
	}
	var a *app // set before the app's loops start, so before stage runs
	var path demo.PathRecorder
	onPressure := demoPressureHook(o.log, o.onPressure)
	stage := func(name string) {
		if name == "pressure" {
			onPressure(a.pressure.Snapshot())
			recordPath(&path, a, now())
		}
	}
	a, err = newApp(cfg, appOptions{log: o.log, stage: stage})
	if err != nil {
		closeAll()
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
	adminURL := "http://" + o.admin.Addr().String()
	o.log.LogAttrs(ctx, slog.LevelInfo, "demo pod started",
		slog.String("upstream", demo.Upstream), slog.String("url", podURL), slog.String("pod", o.pod.Name),
		slog.String("gpu", demo.GPU), slog.String("model", demo.Model),
		slog.Float64("gpu_memory_utilization", o.pod.GPUMemoryUtilization), slog.Float64("speed", speed))
	logCurls(ctx, o.log, o.banner, trafficURL, adminURL)

	if o.load != nil {
		ls := *o.load
		ls.URL, ls.Model, ls.Logger = trafficURL, demo.Model, o.log
		ls.State = func() []slog.Attr { return demoStateAttrs(a, &path) }
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

// demoPressureHook is called after the slow breaker has acted on a pressure
// poll round: it logs the first reading from both pod sources, once, and
// passes every round to notify (tests), if set.
func demoPressureHook(log *slog.Logger, notify func(pressure.State)) func(pressure.State) {
	var once sync.Once
	return func(st pressure.State) {
		if attrs, ok := demo.Reading(st); ok {
			once.Do(func() {
				log.LogAttrs(context.Background(), slog.LevelInfo, "demo: first pressure reading", attrs...)
			})
		}
		if notify != nil {
			notify(st)
		}
	}
}

// demoStateAttrs summarises the demo upstream's slow-breaker state and its
// path so far for the load generator's summary lines.
func demoStateAttrs(a *app, path *demo.PathRecorder) []slog.Attr {
	s := a.snapshot()
	sum := demo.Summary{Queue: s.Queue.Length, QueueOrder: s.Queue.Order}
	for _, u := range s.Upstreams {
		if u.Name == demo.Upstream {
			sum.Pod = &demo.PodSummary{Level: u.Level, Phase: u.Phase, Window: u.WindowLimit, InFlight: u.InFlight,
				Signals: u.Signals, Path: path.Path()}
		}
	}
	return sum.Attrs()
}

// recordPath adds the demo upstream's level and signals after a pressure
// round to path.
func recordPath(path *demo.PathRecorder, a *app, now time.Time) {
	for _, u := range a.snapshot().Upstreams {
		if u.Name == demo.Upstream {
			path.Observe(now, u.Level, u.Signals)
		}
	}
}

// logCurls tells the newcomer where to point curl: JSON log lines, and the
// same commands as plain text on banner, where they paste as they are.
func logCurls(ctx context.Context, log *slog.Logger, banner io.Writer, trafficURL, adminURL string) {
	chat, state, metrics := demo.Curls(trafficURL, adminURL)
	log.LogAttrs(ctx, slog.LevelInfo, "demo ready",
		slog.String("listen", trafficURL), slog.String("admin_listen", adminURL),
		slog.String("chat_curl", chat), slog.String("state_curl", state), slog.String("metrics_curl", metrics))
	if banner != nil {
		fmt.Fprint(banner, demo.Banner(trafficURL, adminURL))
	}
}
