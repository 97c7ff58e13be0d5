package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// eppTarget is an endpoint picker the EPP scenarios drive: its ext_proc
// address, its admin base URL (/admin/state, /metrics, /debug/pprof) and its
// process id.
type eppTarget struct {
	name, addr, admin string
	pid               int
}

// decisionScenario is what -epp decisions reports, as JSON.
type decisionScenario struct {
	Date      string           `json:"date"`
	Rate      int              `json:"rate"` // decisions per second, open loop
	DurS      float64          `json:"dur_s"`
	WarmupS   float64          `json:"warmup_s"`
	Slices    int              `json:"slices"` // DurS per target, measured in this many alternating slices
	Conns     int              `json:"conns"`
	BodyBytes int              `json:"body_bytes"`
	Targets   []decisionResult `json:"targets"`
}

// decisionResult is one target's decisions over every slice, the warm-up
// left out. Latencies in µs; exact order statistics.
type decisionResult struct {
	Name       string         `json:"name"`
	Sent       int            `json:"sent"`
	OK         int            `json:"ok"`
	Errors     int            `json:"errors"`
	ErrWhy     map[string]int `json:"err_why,omitempty"`
	ErrExample string         `json:"err_example,omitempty"`
	P50US      float64        `json:"p50_us"`
	P90US      float64        `json:"p90_us"`
	P99US      float64        `json:"p99_us"`
	P999US     float64        `json:"p999_us"`
	MaxUS      float64        `json:"max_us"`
	SliceP99US []float64      `json:"slice_p99_us"`
	Achieved   float64        `json:"achieved"` // whole exchanges completed per second of measured time
	// LagP99US and LagMaxUS say how late the driver sent against its fixed
	// schedule: large values mean the load generator, not the picker, fell
	// behind.
	LagP99US float64 `json:"lag_p99_us"`
	LagMaxUS float64 `json:"lag_max_us"`
	// CPUUS is the picker process's CPU time (utime + stime) per whole
	// exchange; -1 without a pid.
	CPUUS float64 `json:"cpu_us"`
	// DriverCPUUS is the driver's own CPU time per exchange (Envoy's side,
	// on the same CPUs).
	DriverCPUUS float64 `json:"driver_cpu_us"`
}

// decisionRun is one attack's outcome.
type decisionRun struct {
	lat, lag []time.Duration // measured exchanges only
	sent     int
	errWhy   map[string]int
	example  string
	measured time.Duration // from the first measured send to the last exchange's end
	cpuUS    float64
	ownUS    float64 // the driver's CPU per exchange
}

// ownCPU is the driver's own user + system CPU time so far.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// attackDecisions sends rate exchanges a second to e on a fixed schedule
// for warm+dur, each on its own goroutine without waiting for the ones
// before (open loop), and keeps what was scheduled after warm.
func attackDecisions(ctx context.Context, e *envoy, pid, rate int, warm, dur time.Duration) decisionRun {
	period := time.Second / time.Duration(rate)
	nWarm := int(warm / period)
	n := nWarm + int(dur/period)
	lat := make([]time.Duration, n) // slot i is written by exchange i alone
	ok := make([]bool, n)
	lag := make([]time.Duration, n)
	run := decisionRun{errWhy: map[string]int{}, cpuUS: -1}
	var mu sync.Mutex // guards run.errWhy and run.example
	cpu0, cpuErr := cpuSeconds(pid)
	own0 := ownCPU()
	start := time.Now().Add(time.Millisecond)
	var wg sync.WaitGroup
	for i := range n {
		due := start.Add(time.Duration(i) * period)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		lag[i] = time.Since(due)
		wg.Go(func() {
			xctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			l, err := e.exchange(xctx)
			if err == nil {
				lat[i], ok[i] = l, true
				return
			}
			if i < nWarm {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			run.errWhy[whyOf(err)]++
			if run.example == "" {
				run.example = err.Error()
			}
		})
	}
	wg.Wait()
	run.measured = time.Since(start.Add(warm))
	run.ownUS = float64(ownCPU()-own0) / 1e3 / float64(n)
	if c, err := cpuSeconds(pid); err == nil && cpuErr == nil && pid > 0 {
		run.cpuUS = (c - cpu0) * 1e6 / float64(n)
	}
	run.sent = n - nWarm
	for i := nWarm; i < n; i++ {
		run.lag = append(run.lag, lag[i])
		if ok[i] {
			run.lat = append(run.lat, lat[i])
		}
	}
	return run
}

// runDecisions warms every target up, then measures them in o.slices
// alternating slices of o.dur/o.slices each, the first target rotating by
// slice, so that load from outside the bench that comes and goes falls on
// both alike. With profOut set it then drives the first target once more,
// unmeasured, for a CPU profile (and its allocation profile next to it) from
// its admin listener.
func runDecisions(ctx context.Context, o eppOptions) (*decisionScenario, error) {
	sc := &decisionScenario{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Rate: o.rate,
		DurS: o.dur.Seconds(), WarmupS: o.warmup.Seconds(), Slices: o.slices, Conns: o.conns, BodyBytes: o.bodyBytes}
	envoys, err := dialTargets(ctx, o)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, e := range envoys {
			e.close()
		}
	}()
	for k, t := range o.targets {
		attackDecisions(ctx, envoys[k], t.pid, o.rate, o.warmup, 0)
	}
	slice := o.dur / time.Duration(o.slices)
	runs := make([][]decisionRun, len(o.targets))
	for n := range o.slices {
		for i := range o.targets {
			k := (i + n) % len(o.targets)
			runs[k] = append(runs[k], attackDecisions(ctx, envoys[k], o.targets[k].pid, o.rate, 0, slice))
			time.Sleep(200 * time.Millisecond) // let the last streams' ends settle
		}
	}
	log.Printf("epp decisions: %d slices done", o.slices)
	for k, t := range o.targets {
		sc.Targets = append(sc.Targets, mergeDecisions(t.name, runs[k]))
	}
	if o.profOut != "" && o.targets[0].admin != "" {
		t := o.targets[0]
		var wg sync.WaitGroup
		wg.Go(func() { attackDecisions(ctx, envoys[0], t.pid, o.rate, time.Second, o.dur+time.Second) })
		time.Sleep(time.Second)
		err := fetch(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", t.admin, int(o.dur.Seconds())), o.profOut)
		if err == nil {
			err = fetch(t.admin+"/debug/pprof/allocs", strings.TrimSuffix(o.profOut, ".pprof")+".allocs.pprof")
		}
		wg.Wait()
		if err != nil {
			log.Printf("epp profile: %v", err)
		}
	}
	return sc, nil
}

// dialTargets connects to every target once its readiness is SERVING and
// warms each connection with a few exchanges.
func dialTargets(ctx context.Context, o eppOptions) ([]*envoy, error) {
	var envoys []*envoy
	for _, t := range o.targets {
		if err := waitServing(ctx, t.addr, 30*time.Second); err != nil {
			return nil, err
		}
		e, err := dialEnvoy(ctx, t.addr, o.conns, o.bodyBytes)
		if err != nil {
			return nil, err
		}
		envoys = append(envoys, e)
		for range 20 * o.conns {
			if _, err := e.exchange(ctx); err != nil {
				return nil, fmt.Errorf("driver: %s: warm-up exchange: %w", t.name, err)
			}
		}
	}
	return envoys, nil
}

func mergeDecisions(name string, runs []decisionRun) decisionResult {
	r := decisionResult{Name: name, ErrWhy: map[string]int{}, CPUUS: -1}
	var lat, lag []time.Duration
	var measured time.Duration
	var cpu, own float64
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	for _, run := range runs {
		r.Sent += run.sent
		lat = append(lat, run.lat...)
		lag = append(lag, run.lag...)
		measured += run.measured
		for k, v := range run.errWhy {
			r.ErrWhy[k] += v
			r.Errors += v
		}
		if r.ErrExample == "" {
			r.ErrExample = run.example
		}
		cpu += run.cpuUS
		own += run.ownUS
		slices.Sort(run.lat)
		r.SliceP99US = append(r.SliceP99US, us(traffic.Quantile(run.lat, 0.99)))
	}
	if len(runs) > 0 && runs[0].cpuUS >= 0 {
		r.CPUUS = cpu / float64(len(runs))
	}
	if len(runs) > 0 {
		r.DriverCPUUS = own / float64(len(runs))
	}
	if r.Errors == 0 {
		r.ErrWhy = nil
	}
	slices.Sort(lat)
	slices.Sort(lag)
	r.OK = len(lat)
	r.P50US, r.P90US, r.P99US = us(traffic.Quantile(lat, 0.5)), us(traffic.Quantile(lat, 0.9)), us(traffic.Quantile(lat, 0.99))
	r.P999US, r.MaxUS = us(traffic.Quantile(lat, 0.999)), us(traffic.Quantile(lat, 1))
	r.LagP99US, r.LagMaxUS = us(traffic.Quantile(lag, 0.99)), us(traffic.Quantile(lag, 1))
	if measured > 0 {
		r.Achieved = float64(r.OK) / measured.Seconds()
	}
	return r
}
