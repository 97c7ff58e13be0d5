// Package advise is the capacity advisor (issue 37, item 4): for a model,
// GPU types, values of gpu_memory_utilization and max_num_seqs and a traffic
// shape, it replays the traffic (package sim/replay) with gatekeeper's
// controller in front of each simulated pod and finds, for every grid point,
// the fewest pods whose SLO attainment meets a target; then, per GPU, the
// point that needs the fewest pods. docs/simulation.md says how to read its
// table and where it stops being true.
package advise

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

// Traffic is the whole pool's traffic: Poisson arrivals at SteadyQPS with
// bursts at BurstQPS, split evenly between the pods.
type Traffic struct {
	// SteadyQPS is the steady arrival rate of the pool, > 0.
	SteadyQPS float64
	// BurstQPS is the rate during bursts. 0 means SteadyQPS (no bursts).
	BurstQPS float64
	// BurstEvery is the time from one burst's start to the next; each
	// burst closes its period, as the replay's. 0 means 30m or the
	// horizon, whichever is shorter, so every replay holds a burst.
	BurstEvery time.Duration
	// BurstLength is how long a burst lasts. 0 means 5m or BurstEvery,
	// whichever is shorter.
	BurstLength time.Duration
	// Classes is the request mix (prompt and output lengths). Nil means
	// replay.DefaultClasses (85 % short chats, 15 % long documents). The
	// replay's SLO and clients go by class name: "short" (2 s to the first
	// token, interactive users who give up) and "long" (10 s, SDK clients).
	Classes []replay.Class
}

// Settings configures an advice. Model, GPUs and Traffic.SteadyQPS are
// required; the other zero fields select the defaults.
type Settings struct {
	// Model is the served model (sim.ModelByName or explicit sizes).
	Model sim.Model
	// GPUs are the device types to compare, each pod on one GPU.
	GPUs []sim.GPU
	// Utilizations are the gpu_memory_utilization values, each in (0, 1].
	// Nil means 0.8 and 0.9.
	Utilizations []float64
	// MaxNumSeqs are the max_num_seqs values, each ≥ 0 (0: vLLM's server
	// default for the GPU). Nil means {0}.
	MaxNumSeqs []int
	// Traffic is the pool's traffic.
	Traffic Traffic
	// Horizon is the virtual length of each replay, > 0. 0 means 15m.
	Horizon time.Duration
	// Seed is the trace's seed.
	Seed uint64
	// SLOTarget is the SLO attainment a pod count must reach, in (0, 1].
	// 0 means 0.99.
	SLOTarget float64
	// MaxOOMs is the most OOMs a pod may have in the horizon and still
	// count. 0 means none may.
	MaxOOMs int64
	// MaxPods bounds the search. 0 means 64.
	MaxPods int
	// Parallel is how many grid points run at once. 0 means GOMAXPROCS.
	Parallel int
	// Engine holds the engine settings besides GPU, model,
	// gpu_memory_utilization and max_num_seqs (zero: sim's defaults).
	Engine sim.Settings
	// Progress, if set, is called once per grid point done, from one
	// goroutine at a time.
	Progress func(Progress)
}

// Progress is one grid point done.
type Progress struct {
	Done, Total int
	Point       Point
	Elapsed     time.Duration
	// ETA is the estimated real time left: the real time per point done so
	// far (points running at once) × the points left.
	ETA time.Duration
}

// Point is one grid point: a GPU, gpu_memory_utilization and max_num_seqs,
// and the smallest pod count that met the target.
type Point struct {
	GPU                  string  `json:"gpu"`
	GPUMemoryBytes       int64   `json:"gpu_memory_bytes"`
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization"`
	// Headroom is 1 − gpu_memory_utilization: the share of the device vLLM
	// leaves outside its plan; HeadroomBytes the same in bytes.
	Headroom      float64 `json:"headroom"`
	HeadroomBytes int64   `json:"headroom_bytes"`
	// MaxNumSeqs is the engine's max_num_seqs (the default resolved).
	MaxNumSeqs int `json:"max_num_seqs"`
	// Fits is false when vLLM would refuse to start (NotFit says why): the
	// weights, the profiled peak and the rest leave no KV cache, or the KV
	// cache cannot hold one sequence of max_model_len tokens.
	Fits   bool   `json:"fits"`
	NotFit string `json:"not_fit,omitempty"`
	// KVCacheBytes and KVCacheTokens are the start-up plan's KV cache;
	// KVShare is KVCacheBytes ÷ device memory.
	KVCacheBytes  int64   `json:"kv_cache_bytes"`
	KVCacheTokens int64   `json:"kv_cache_tokens"`
	KVShare       float64 `json:"kv_share"`
	// Pods is the smallest pod count that met the target; 0 when none up to
	// MaxPods did (Met false).
	Pods int  `json:"pods"`
	Met  bool `json:"met"`
	// SteadyQPS and BurstQPS are each pod's traffic at Pods (or at MaxPods
	// when none met).
	SteadyQPS float64 `json:"steady_qps_per_pod"`
	BurstQPS  float64 `json:"burst_qps_per_pod"`
	// SLOAttainment, OOMs and EffectiveMemoryUse are the run at Pods (at
	// MaxPods when none met). SLOAttainment is the share of the requests
	// that ended within the horizon that met both deadlines (refused,
	// abandoned, failed and late ones count against it). EffectiveMemoryUse is the replay's effective
	// utilization: the memory doing work (live allocations, the KV cache
	// counted by its blocks in use) ÷ the memory the process holds, the
	// mean over the run's samples.
	SLOAttainment      float64 `json:"slo_attainment"`
	OOMs               int64   `json:"ooms"`
	EffectiveMemoryUse float64 `json:"effective_memory_use"`
	// Runs is how many replays the search took.
	Runs int `json:"runs"`
}

// Report is an advice: every grid point and, per GPU, the best one.
type Report struct {
	Model     string        `json:"model"`
	Traffic   Traffic       `json:"-"`
	SteadyQPS float64       `json:"steady_qps"`
	BurstQPS  float64       `json:"burst_qps"`
	Horizon   time.Duration `json:"-"`
	Hours     float64       `json:"hours"`
	Seed      uint64        `json:"seed"`
	SLOTarget float64       `json:"slo_target"`
	MaxOOMs   int64         `json:"max_ooms"`
	MaxPods   int           `json:"max_pods"`
	// Best holds, for each GPU in Settings' order, the point chosen (Met
	// first, then fewest pods, fewest OOMs, most headroom, highest SLO
	// attainment, smallest max_num_seqs); a GPU no point fits or meets has
	// its best try, Met false.
	Best []Point `json:"best"`
	// Points are every grid point: GPUs, then utilizations, then
	// max_num_seqs, in Settings' order.
	Points []Point `json:"points"`
}

// Run runs the grid, Parallel points at a time, and chooses per GPU. The
// same Settings give the same Report: every replay is seeded and in virtual
// time, and the points do not share state.
func Run(s Settings) (Report, error) {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return Report{}, err
	}
	type job struct {
		i    int
		gpu  sim.GPU
		util float64
		seqs int
	}
	var jobs []job
	for _, g := range s.GPUs {
		for _, u := range s.Utilizations {
			for _, n := range s.MaxNumSeqs {
				jobs = append(jobs, job{len(jobs), g, u, n})
			}
		}
	}
	points := make([]Point, len(jobs))
	errs := make([]error, len(jobs))
	start := time.Now()
	var mu sync.Mutex
	done := 0
	ch := make(chan job)
	var wg sync.WaitGroup
	for range min(s.Parallel, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				points[j.i], errs[j.i] = s.point(j.gpu, j.util, j.seqs)
				mu.Lock()
				done++
				if s.Progress != nil {
					el := time.Since(start)
					eta := time.Duration(float64(el) / float64(done) * float64(len(jobs)-done))
					s.Progress(Progress{Done: done, Total: len(jobs), Point: points[j.i], Elapsed: el, ETA: eta})
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Report{}, err
	}
	rep := Report{Model: s.Model.Name, Traffic: s.Traffic, SteadyQPS: s.Traffic.SteadyQPS, BurstQPS: s.Traffic.BurstQPS,
		Horizon: s.Horizon, Hours: s.Horizon.Hours(), Seed: s.Seed, SLOTarget: s.SLOTarget, MaxOOMs: s.MaxOOMs,
		MaxPods: s.MaxPods, Points: points}
	for _, g := range s.GPUs {
		var cands []Point
		for _, p := range points {
			if p.GPU == g.Name {
				cands = append(cands, p)
			}
		}
		rep.Best = append(rep.Best, slices.MinFunc(cands, better))
	}
	return rep, nil
}

// better orders points from best to worst (see Report.Best).
func better(a, b Point) int {
	if c := cmp.Compare(rank(b), rank(a)); c != 0 {
		return c
	}
	if a.Met {
		if c := cmp.Compare(a.Pods, b.Pods); c != 0 {
			return c
		}
	}
	return cmp.Or(cmp.Compare(a.OOMs, b.OOMs), cmp.Compare(b.Headroom, a.Headroom),
		cmp.Compare(b.SLOAttainment, a.SLOAttainment), cmp.Compare(a.MaxNumSeqs, b.MaxNumSeqs))
}

// rank is 2 for a point that met the target, 1 for one that fits, 0 else.
func rank(p Point) int {
	switch {
	case p.Met:
		return 2
	case p.Fits:
		return 1
	}
	return 0
}

// point plans the engine once (vLLM's start-up checks) and searches the pod
// count: 1, 2, 4, … until a count meets the target, then the counts
// between that one and the last that failed, by bisection. The search
// takes attainment to grow with the pod count (less traffic per pod), which
// holds unless one seed's trace is unlucky; the table says which count it
// ran.
func (s Settings) point(g sim.GPU, util float64, seqs int) (Point, error) {
	es := s.Engine
	es.GPU, es.Model, es.GPUMemoryUtilization, es.MaxNumSeqs = g, s.Model, util, seqs
	p := Point{GPU: g.Name, GPUMemoryBytes: g.MemoryBytes, GPUMemoryUtilization: util, Headroom: 1 - util,
		HeadroomBytes: g.MemoryBytes - int64(float64(g.MemoryBytes)*util)}
	e, err := sim.New(es)
	if err != nil {
		p.NotFit = err.Error()
		return p, nil
	}
	es = e.Settings()
	plan := e.Plan()
	p.MaxNumSeqs = es.MaxNumSeqs
	p.KVCacheBytes, p.KVCacheTokens = plan.KVCacheBytes, int64(plan.NumGPUBlocks)*int64(es.BlockSize)
	p.KVShare = float64(plan.KVCacheBytes) / float64(g.MemoryBytes)
	if p.KVCacheTokens < int64(es.MaxModelLen) {
		// vLLM's _check_enough_kv_cache_memory: "the model's max seq len
		// is larger than the maximum number of tokens that can be stored
		// in KV cache".
		p.NotFit = fmt.Sprintf("the KV cache holds %d tokens, fewer than max_model_len %d, as vLLM refuses", p.KVCacheTokens, es.MaxModelLen)
		return p, nil
	}
	p.Fits = true
	runs := map[int]replay.Result{}
	try := func(n int) (bool, error) {
		if r, ok := runs[n]; ok {
			return s.meets(r), nil
		}
		r, err := s.replay(es, n)
		if err != nil {
			return false, fmt.Errorf("advise: %s at %.2f, max_num_seqs %d, %d pods: %w", g.Name, util, es.MaxNumSeqs, n, err)
		}
		runs[n] = r
		return s.meets(r), nil
	}
	lo, hi := 0, 0 // lo failed (0: none tried), hi met
	for n := 1; ; n = min(2*n, s.MaxPods) {
		ok, err := try(n)
		if err != nil {
			return p, err
		}
		if ok {
			hi = n
			break
		}
		lo = n
		if n == s.MaxPods {
			break
		}
	}
	if hi > 0 {
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			ok, err := try(mid)
			if err != nil {
				return p, err
			}
			if ok {
				hi = mid
			} else {
				lo = mid
			}
		}
	}
	n := cmp.Or(hi, s.MaxPods)
	r := runs[n]
	p.Met, p.Runs = hi > 0, len(runs)
	if p.Met {
		p.Pods = n
	}
	p.SteadyQPS, p.BurstQPS = s.Traffic.SteadyQPS/float64(n), s.Traffic.BurstQPS/float64(n)
	p.SLOAttainment, p.OOMs, p.EffectiveMemoryUse = attainment(r), r.OOMs, r.EffectiveUtilization
	return p, nil
}

func (s Settings) meets(r replay.Result) bool {
	return attainment(r) >= s.SLOTarget && r.OOMs <= s.MaxOOMs
}

// attainment is the share of the requests that ended within the horizon
// (met, late, abandoned, refused or failed) that met the SLO: a short
// replay's last requests, still running when it stops, count neither way
// (replay's SLOAttainment counts them as missed, which in minutes of
// traffic at a few QPS a pod is a visible share).
func attainment(r replay.Result) float64 {
	ended := r.Arrivals - r.Requests.Unfinished
	if ended <= 0 {
		return 0
	}
	return float64(r.Requests.Met) / float64(ended)
}

// replay runs one pod of n under gatekeeper's default policy with the fast
// breaker's global limit off (it is sized to the whole pool, which one pod
// does not see).
func (s Settings) replay(es sim.Settings, n int) (replay.Result, error) {
	t := s.Traffic
	return replay.Run(replay.Settings{
		Engine:     es,
		Scenario:   "advise",
		Policy:     replay.Gatekeeper,
		LimiterOff: true,
		Trace: replay.TraceSettings{Duration: s.Horizon, BaseQPS: t.SteadyQPS / float64(n), BurstQPS: t.BurstQPS / float64(n),
			BurstEvery: t.BurstEvery, BurstLength: t.BurstLength, Classes: t.Classes, Seed: s.Seed},
	})
}
