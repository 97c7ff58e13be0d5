package main

import (
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

	"github.com/gatekeeper-dev/gatekeeper/config"
	"github.com/gatekeeper-dev/gatekeeper/pressure"
	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/load"
	"github.com/gatekeeper-dev/gatekeeper/sim/server"
)

// The demo's simulated pod (issue 5 item 3): an A10G (24 GB) serving
// Llama-3-8B, the smallest preset pair, so a few requests per second fill the
// KV cache and the step buffers' headroom (2.4 GB outside
// gpu_memory_utilization) and the levels, window and queue visibly move. It
// runs in real time (Speed 1): latencies are what that GPU would show.
const (
	demoGPU         = "A10G"
	demoModel       = "meta-llama/Meta-Llama-3-8B"
	demoUpstream    = "vllm-sim"
	demoMaxSeqs     = 64               // the pod's max_num_seqs = the window's maximum
	demoSpeed       = 1.0              // virtual seconds per real second
	demoRestartTime = 20 * time.Second // an OOM'd pod is back in 20 s, not vLLM's minutes
)

// demoFlags are the -demo command line flags.
type demoFlags struct {
	on          bool   // -demo
	load        bool   // -demo-load (implies -demo)
	listen      string // -demo-listen
	adminListen string // -demo-admin-listen
}

// register declares the demo flags on fs.
func (d *demoFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&d.on, "demo", false, "run a simulated vLLM pod (A10G, Llama-3-8B, real time) behind gatekeeper on loopback, with a demo policy; no -config")
	fs.BoolVar(&d.load, "demo-load", false, "with the demo, send a built-in traffic pattern (2 QPS steady, then 4× bursts, mixed chat and long documents); implies -demo")
	fs.StringVar(&d.listen, "demo-listen", "127.0.0.1:8080", "demo traffic `address` (the OpenAI API, /healthz, /readyz)")
	fs.StringVar(&d.adminListen, "demo-admin-listen", "127.0.0.1:9090", "demo admin `address` (/metrics, /admin/state)")
}

// enabled reports whether the command line asks for the demo.
func (d demoFlags) enabled() bool { return d.on || d.load }

// validate refuses the flags the demo cannot honour: it builds its own
// policy, so a policy file or -check is a mistake.
func (d demoFlags) validate(config string, check bool) error {
	if config != "" || check {
		return errors.New("gatekeeper: -demo builds its own policy; it takes no -config or -check (use -demo-listen, -demo-admin-listen)")
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
	opts := demoOptions{traffic: traffic, admin: admin, log: log, banner: stdout, drainDelay: time.Second}
	if d.load {
		opts.load = &load.Settings{}
	}
	return serveDemo(ctx, opts)
}

// demoOptions are serveDemo's inputs; tests pass loopback listeners on
// ephemeral ports and hooks.
type demoOptions struct {
	traffic, admin net.Listener // required; serveDemo closes them
	sim            net.Listener // the pod's; nil opens 127.0.0.1:0
	log            *slog.Logger // nil discards
	banner         io.Writer    // receives the paste-ready curl lines; nil: none
	speed          float64      // sim speed; 0 means demoSpeed
	drainDelay     time.Duration
	// load, if set, runs the built-in traffic pattern (its URL, Model,
	// Logger and State are filled in).
	load *load.Settings
	// onPressure, if set, is called after the slow breaker has seen each
	// pressure poll round (tests wait on it for the first reading).
	onPressure func(pressure.State)
	// onLoadDone, if set, receives the load generator's final counts.
	onLoadDone func(load.Stats)
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
	pod, err := newDemoPod(o.speed, o.log)
	if err != nil {
		closeAll()
		return err
	}
	podURL := "http://" + simLn.Addr().String()
	cfg, err := config.Parse(demoPolicy(podURL, o.traffic.Addr().String(), o.admin.Addr().String(), o.drainDelay))
	if err != nil {
		closeAll()
		return fmt.Errorf("gatekeeper: demo policy: %w", err)
	}
	var a *app // set before the app's loops start, so before stage runs
	onPressure := demoPressureHook(o.log, o.onPressure)
	stage := func(name string) {
		if name == "pressure" {
			onPressure(a.pressure.snapshot())
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
		slog.String("upstream", demoUpstream), slog.String("url", podURL), slog.String("gpu", demoGPU),
		slog.String("model", demoModel), slog.Float64("speed", speedOr(o.speed)))
	logCurls(ctx, o.log, o.banner, trafficURL, adminURL)

	if o.load != nil {
		ls := *o.load
		ls.URL, ls.Model, ls.Logger = trafficURL, demoModel, o.log
		ls.State = func() []slog.Attr { return demoStateAttrs(a) }
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

// newDemoPod builds the simulated pod.
func newDemoPod(speed float64, log *slog.Logger) (*server.Server, error) {
	gpu, err := sim.GPUByName(demoGPU)
	if err != nil {
		return nil, fmt.Errorf("gatekeeper: demo pod: %w", err)
	}
	model, err := sim.ModelByName(demoModel)
	if err != nil {
		return nil, fmt.Errorf("gatekeeper: demo pod: %w", err)
	}
	e, err := sim.New(sim.Settings{GPU: gpu, Model: model, MaxNumSeqs: demoMaxSeqs, RestartTime: demoRestartTime})
	if err != nil {
		return nil, fmt.Errorf("gatekeeper: demo pod: %w", err)
	}
	srv, err := server.New(e, server.Settings{Speed: speedOr(speed), Seed: 1,
		Logger: log.With(slog.String("upstream", demoUpstream))})
	if err != nil {
		return nil, fmt.Errorf("gatekeeper: demo pod: %w", err)
	}
	return srv, nil
}

func speedOr(s float64) float64 {
	if s == 0 {
		return demoSpeed
	}
	return s
}

// demoPolicy is the demo's policy file: the defaults of config.yaml except
// what a one-pod loopback demo needs. It is parsed and validated like a
// user's file.
func demoPolicy(podURL, listen, adminListen string, drainDelay time.Duration) []byte {
	return fmt.Appendf(nil, `# gatekeeper -demo: one simulated vLLM pod on loopback.
mode: enforce
server:
  listen: %q
  admin_listen: %q
  drain_delay: %s        # no load balancer to warn in a demo
  shutdown_timeout: 10s
upstreams:
  - name: %s
    url: %q
    max_inflight: %d     # = the simulated pod's max_num_seqs
    min_inflight: 4
    sources:
      - {kind: vllm, url: %q}
      - {kind: memory_blocks, url: %q}
health_check:
  interval: 2s
pressure:
  interval: 500ms
  hold: 3s               # leave a level after 3 s below it (default 5 s)
fast_breaker:
  qps: 8                 # -demo-load's bursts (8 QPS) meet a few 429s
  burst: 4
queue:
  max_length: 256
  max_wait: 20s
hooks:
  degraded:
    - {method: POST, url: /v1/internal/empty_cache}   # the pod flushes its allocator cache
`, listen, adminListen, drainDelay, demoUpstream, podURL, demoMaxSeqs,
		podURL+"/metrics", podURL+"/v1/internal/metrics")
}

// demoPressureHook is called after the slow breaker has acted on a pressure
// poll round: it logs the first reading from both pod sources, once, and
// passes every round to notify (tests), if set.
func demoPressureHook(log *slog.Logger, notify func(pressure.State)) func(pressure.State) {
	var once sync.Once
	return func(st pressure.State) {
		us, _ := st.Upstream(demoUpstream)
		_, kv := us.Signals[pressure.KVCacheUsage]    // from the pod's /metrics
		_, frag := us.Signals[pressure.Fragmentation] // from its memory_blocks endpoint
		if kv && frag {
			once.Do(func() {
				attrs := []slog.Attr{slog.String("upstream", demoUpstream)}
				for _, sig := range pressure.Signals() {
					if v, ok := us.Signals[sig]; ok {
						attrs = append(attrs, slog.Float64(string(sig), v.Value))
					}
				}
				log.LogAttrs(context.Background(), slog.LevelInfo, "demo: first pressure reading", attrs...)
			})
		}
		if notify != nil {
			notify(st)
		}
	}
}

// demoStateAttrs summarises the demo upstream's slow-breaker state for the
// load generator's summary lines.
func demoStateAttrs(a *app) []slog.Attr {
	s := a.snapshot()
	attrs := []slog.Attr{slog.Int("queue", s.Queue.Length), slog.String("queue_order", s.Queue.Order)}
	for _, u := range s.Upstreams {
		if u.Name != demoUpstream {
			continue
		}
		attrs = append(attrs, slog.String("level", u.Level), slog.String("phase", u.Phase),
			slog.Int("window", u.WindowLimit), slog.Int("inflight", u.InFlight))
		for _, sig := range []pressure.Signal{pressure.Fragmentation, pressure.KVCacheUsage} {
			if v, ok := u.Signals[sig]; ok {
				attrs = append(attrs, slog.Float64(string(sig), v.Value))
			}
		}
	}
	return attrs
}

// logCurls tells the newcomer where to point curl: JSON log lines, and the
// same commands as plain text on banner, where they paste as they are.
func logCurls(ctx context.Context, log *slog.Logger, banner io.Writer, trafficURL, adminURL string) {
	chat := fmt.Sprintf(`curl -N %s/v1/chat/completions -H 'Content-Type: application/json' -d '{"model":%q,"stream":true,"max_tokens":64,"messages":[{"role":"user","content":"Why do GPUs run out of memory?"}]}'`,
		trafficURL, demoModel)
	state := fmt.Sprintf("curl -s %s/admin/state", adminURL)
	metrics := fmt.Sprintf("curl -s %s/metrics | grep -E '^(gatekeeper|vllm)_'", adminURL)
	log.LogAttrs(ctx, slog.LevelInfo, "demo ready",
		slog.String("listen", trafficURL), slog.String("admin_listen", adminURL),
		slog.String("chat_curl", chat), slog.String("state_curl", state), slog.String("metrics_curl", metrics))
	if banner != nil {
		fmt.Fprintf(banner, "gatekeeper demo: traffic %s, admin %s (Ctrl-C to stop)\n\n# a streaming chat completion through gatekeeper\n%s\n\n# gatekeeper's state: levels, signals, window, queue\n%s\n\n# metrics\n%s\n\n",
			trafficURL, adminURL, chat, state, metrics)
	}
}
