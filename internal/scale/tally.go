package scale

import (
	"sync"
	"sync/atomic"
)

// capacityCauses are the refusal reasons that are demand the pool could not
// serve; the others (a bad request, a client's rate limit or quota, the
// drain) would not be served by more pods either.
var capacityCauses = [...]string{"queue_full", "queue_timeout", "deadline", "overloaded", "no_memory",
	"shed_priority", "no_upstream", "upstream_overloaded"}

// causeIndex is reason's index in capacityCauses, -1 when it is not one.
func causeIndex(reason string) int {
	for i, c := range capacityCauses {
		if c == reason {
			return i
		}
	}
	return -1
}

// capacityCause reports whether a refusal reason is demand the pool could
// not serve.
func capacityCause(reason string) bool { return causeIndex(reason) >= 0 }

// Tally is what the decision core counts per model for the scaling signal
// (decide.PoolCounter): the requests routed to each model, those refused
// for a capacity cause, and those waiting for a slot now. It counts only
// the models of its last sample (the models the pods list, GatherPools), so
// neither its memory nor the exported series grow with the model names
// clients send; a model a pod starts to list is counted from the next
// sample on. Counting is an atomic load, a map lookup and an atomic add.
// The zero value counts nothing until a sample names models; safe for
// concurrent use.
type Tally struct {
	mu     sync.Mutex // serializes keep
	models atomic.Pointer[map[string]*modelTally]
}

// modelTally is one model's counts: arrivals and refusals only grow.
type modelTally struct {
	arrivals atomic.Uint64
	refused  [len(capacityCauses)]atomic.Uint64
	waiting  atomic.Int64
}

// get is model's counts, nil when it is not counted.
func (t *Tally) get(model string) *modelTally {
	if t == nil || model == "" {
		return nil
	}
	if m := t.models.Load(); m != nil {
		return (*m)[model]
	}
	return nil
}

// Arrived counts a request routed to model.
func (t *Tally) Arrived(model string) {
	if m := t.get(model); m != nil {
		m.arrivals.Add(1)
	}
}

// Refused counts a request for model refused for reason; reasons that are
// not a capacity cause are not counted.
func (t *Tally) Refused(model, reason string) {
	if i := causeIndex(reason); i >= 0 {
		if m := t.get(model); m != nil {
			m.refused[i].Add(1)
		}
	}
}

// Waiting adds delta to the requests for model waiting for a slot: +1 when
// one starts to wait, -1 when it stops.
func (t *Tally) Waiting(model string, delta int) {
	if m := t.get(model); m != nil {
		m.waiting.Add(int64(delta))
	}
}

// keep makes the models of pools the ones counted ("all" is not a model's
// pool): a model already counted keeps its counts, a new one starts at
// zero, one no longer named is dropped.
func (t *Tally) keep(pools map[string][]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := map[string]*modelTally{}
	if m := t.models.Load(); m != nil {
		old = *m
	}
	next := make(map[string]*modelTally, len(pools))
	for model := range pools {
		if model == poolAll {
			continue
		}
		if next[model] = old[model]; next[model] == nil {
			next[model] = &modelTally{}
		}
	}
	t.models.Store(&next)
}

// counts is model's arrivals, refusals by cause and queue as Counts (the
// pods' part left empty).
func (t *Tally) counts(model string) Counts {
	c := Counts{refused: map[string]float64{}}
	m := t.get(model)
	if m == nil {
		return c
	}
	c.arrivals = float64(m.arrivals.Load())
	for i := range m.refused {
		if n := m.refused[i].Load(); n > 0 {
			c.refused[capacityCauses[i]] = float64(n)
		}
	}
	// A request that began to wait before its model was counted may stop
	// after: never a negative queue.
	c.queue = int(max(0, m.waiting.Load()))
	return c
}
