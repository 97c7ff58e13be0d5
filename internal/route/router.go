package route

import (
	"errors"
	"fmt"
	"math"
	"sync"
)

// Weights weigh the four scorers in a pod's score (routing.scorers). Each is
// at least 0; a pod's score is the weighted mean of its scorers' values.
// All zero: every pod scores 0 and the queue's own choice (the most free
// window) decides.
type Weights struct {
	Prefix, Load, KV, Memory float64
}

func (w Weights) sum() float64 { return w.Prefix + w.Load + w.KV + w.Memory }

func (w Weights) validate() error {
	for _, v := range []float64{w.Prefix, w.Load, w.KV, w.Memory} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("route: weights must be finite and at least 0, got %+v", w)
		}
	}
	return nil
}

// Settings configure a Router.
type Settings struct {
	Weights Weights
	// Capacity is the prefix blocks remembered per pod (LRU). 0 means
	// DefaultCapacity; negative is an error.
	Capacity int
}

// DefaultCapacity is 16,384 blocks per pod (about 262,000 tokens of
// prefixes, about 1.5 MiB of memory).
const DefaultCapacity = 16384

// Pod is what the slow path last read of one pod, for the kv, memory and
// load scorers. NaN means unknown: that scorer counts 0.5 for the pod.
type Pod struct {
	// Waiting is the requests the pod queues itself (vLLM's
	// num_requests_waiting).
	Waiting float64
	// KVUsage is the used part of its KV cache, 0 to 1.
	KVUsage float64
	// Memory is its GPU memory headroom, 0 to 1 (MemoryHeadroom).
	Memory float64
}

// Unknown is a Pod of which nothing is known.
var Unknown = Pod{Waiting: math.NaN(), KVUsage: math.NaN(), Memory: math.NaN()}

// Router scores pods for requests. It is safe for concurrent use. Create
// one with New.
type Router struct {
	mu       sync.Mutex // guards the fields below
	weights  Weights
	capacity int
	pods     map[string]*pod
	hit      uint64 // prefix blocks a grant's pod held (Chose), in total
	miss     uint64 // prefix blocks it did not
}

type pod struct {
	state  Pod
	prefix *index
}

// New returns a Router with s, or an error naming what is invalid.
func New(s Settings) (*Router, error) {
	if err := s.Weights.validate(); err != nil {
		return nil, err
	}
	switch {
	case s.Capacity < 0:
		return nil, errors.New("route: capacity must be at least 0")
	case s.Capacity == 0:
		s.Capacity = DefaultCapacity
	}
	return &Router{weights: s.Weights, capacity: s.Capacity, pods: map[string]*pod{}}, nil
}

// SetWeights replaces the weights (a reload); what the pods hold is kept.
func (r *Router) SetWeights(w Weights) error {
	if err := w.validate(); err != nil {
		return err
	}
	r.mu.Lock()
	r.weights = w
	r.mu.Unlock()
	return nil
}

// Weights returns the weights in use.
func (r *Router) Weights() Weights {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.weights
}

// SetPod records what the slow path read of the pod named name.
func (r *Router) SetPod(name string, p Pod) {
	r.mu.Lock()
	r.podLocked(name).state = p
	r.mu.Unlock()
}

// Forget drops everything known of the pod named name: it was removed, or
// it restarted with an empty KV cache.
func (r *Router) Forget(name string) {
	r.mu.Lock()
	delete(r.pods, name)
	r.mu.Unlock()
}

func (r *Router) podLocked(name string) *pod {
	p := r.pods[name]
	if p == nil {
		p = &pod{state: Unknown, prefix: newIndex(r.capacity)}
		r.pods[name] = p
	}
	return p
}

// Score returns the score of the pod named upstream for a request whose
// prompt has the prefix blocks given (Blocks), when the pod's window holds
// inflight of limit slots: the weighted mean of its scorers, 0 to 1. It
// changes nothing (queue.Scorer).
func (r *Router) Score(upstream string, inflight, limit int, prefix []uint64) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.scoreLocked(upstream, inflight, limit, prefix).Total
}

// Values are one pod's scorer values and their weighted mean.
type Values struct {
	Prefix, Load, KV, Memory, Total float64
}

// Explain returns the values behind Score, for the picker's metadata and
// /admin/state.
func (r *Router) Explain(upstream string, inflight, limit int, prefix []uint64) Values {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.scoreLocked(upstream, inflight, limit, prefix)
}

func (r *Router) scoreLocked(upstream string, inflight, limit int, prefix []uint64) Values {
	w := r.weights
	sum := w.sum()
	p := r.pods[upstream]
	state := Unknown
	if p != nil {
		state = p.state
	}
	var v Values
	if len(prefix) > 0 && p != nil {
		v.Prefix = float64(p.prefix.match(prefix)) / float64(len(prefix))
	}
	v.Load = load(inflight, limit, state.Waiting)
	v.KV = known(1 - state.KVUsage)
	v.Memory = known(state.Memory)
	if sum > 0 {
		v.Total = (w.Prefix*v.Prefix + w.Load*v.Load + w.KV*v.KV + w.Memory*v.Memory) / sum
	}
	return v
}

// Chose records that a request with the prefix blocks given went to the pod
// named upstream (queue.Scorer): the pod will hold its prefix. It counts
// the blocks the pod already held as hits, the others as misses (Blocks).
func (r *Router) Chose(upstream string, prefix []uint64) {
	if len(prefix) == 0 {
		return
	}
	r.mu.Lock()
	x := r.podLocked(upstream).prefix
	n := x.match(prefix)
	r.hit += uint64(n)
	r.miss += uint64(len(prefix) - n)
	x.add(prefix)
	r.mu.Unlock()
}

// Counted returns the prefix blocks of every request granted so far that
// its pod held (hit) and did not (miss): the prefix affinity achieved, by
// the index's estimate.
func (r *Router) Counted() (hit, miss uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hit, r.miss
}

// PodState returns what SetPod last recorded of the pod named name, and
// whether the Router knows the pod (Unknown when it does not).
func (r *Router) PodState(name string) (Pod, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pods[name]; p != nil {
		return p.state, true
	}
	return Unknown, false
}

// load is the free part of a window of limit slots holding inflight, less
// the requests the pod queues itself; 0 for a window of no slots.
func load(inflight, limit int, waiting float64) float64 {
	if limit <= 0 {
		return 0
	}
	if math.IsNaN(waiting) || waiting < 0 {
		waiting = 0
	}
	return clamp01((float64(limit-inflight) - waiting) / float64(limit))
}

// known clamps v to [0, 1], and counts an unknown (NaN) value 0.5.
func known(v float64) float64 {
	if math.IsNaN(v) {
		return 0.5
	}
	return clamp01(v)
}

func clamp01(v float64) float64 { return min(max(v, 0), 1) }

// MemoryHeadroom is the memory scorer's value for a pod: 1 at a
// fragmentation ratio of 1, falling linearly to 0 at shed (the slow
// breaker's critical threshold); and no more than the part of free memory
// that its requests' estimates leave (free − need) ÷ free. A ratio or free
// memory that is unknown (NaN, or free ≤ 0) leaves that part out; both
// unknown give NaN.
func MemoryHeadroom(ratio, shed float64, free, need int64) float64 {
	h := math.NaN()
	if !math.IsNaN(ratio) && shed > 1 {
		h = clamp01((shed - ratio) / (shed - 1))
	}
	if free > 0 {
		f := clamp01(float64(free-need) / float64(free))
		if math.IsNaN(h) || f < h {
			h = f
		}
	}
	return h
}
