package cluster

import "sync"

// Bounds is what the slow breaker last set for one pod: its window and, 0
// meaning none, its memory budget and token limit.
type Bounds struct {
	Window       int
	MemoryBudget int64
	TokenLimit   int64
}

// Enforcer is what Windows pushes each pod's bounds to: the queue, which
// enforces them at admission.
type Enforcer interface {
	SetWindow(pod string, limit int)
	SetMemoryBudget(pod string, budget int64)
	SetTokenLimit(pod string, limit int64)
	RemoveWindow(pod string)
}

// Load is what this replica runs and queues now: the waiters (any of them
// may take any pod its request fits) and the slots in flight per pod.
type Load struct {
	Waiting  int
	InFlight map[string]int
}

// WindowsSettings configures Windows.
type WindowsSettings struct {
	// Queue receives each pod's bounds, or this replica's part of them.
	// Required.
	Queue Enforcer
	// Load reports what the queue runs and holds, for Demand. Nil: none.
	Load func() Load
	// Scaled reports whether the bounds are scaled to this replica's share
	// now: false in observe mode, which bounds nothing. Nil means always.
	Scaled func() bool
}

// Windows holds each pod's bounds as the slow breaker and the policy set
// them, and pushes this replica's part of them to the queue: all of them
// while it runs alone; once ShareWith names a Cluster, the part its lease
// holds (Cluster.Scale), again whenever the lease moves (Reshare, the
// Cluster's OnShares). Create one with NewWindows. Safe for concurrent use;
// must not be copied.
//
// Lock order: Windows' mutex is taken first; under it Update, Drop and
// Reshare call the queue (its own mutex) and Cluster.Scale (the shares'
// mutex), so the queue holds the values in the order they were decided.
// Neither the queue nor the Cluster calls Windows under a lock of its own:
// the Cluster calls Demand and OnShares outside every lock, and Demand asks
// Load before it takes Windows' mutex.
type Windows struct {
	q      Enforcer
	load   func() Load
	scaled func() bool

	// mu guards the fields below and orders the pushes to q.
	mu     sync.Mutex
	set    map[string]Bounds
	shared *Cluster // nil: this replica alone
}

// NewWindows returns Windows holding no pod's bounds.
func NewWindows(s WindowsSettings) *Windows {
	if s.Scaled == nil {
		s.Scaled = func() bool { return true }
	}
	return &Windows{q: s.Queue, load: s.Load, scaled: s.Scaled, set: map[string]Bounds{}}
}

// ShareWith scales every bound to c's leases from now on; it pushes every
// bound again.
func (w *Windows) ShareWith(c *Cluster) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.shared = c
	w.pushAllLocked()
}

// Update changes pod's bounds in place (the zero Bounds when none is set)
// and pushes this replica's part of them, under one lock: the slow path
// sets the budgets and a reload the window of the same pod, and neither
// may undo the other.
func (w *Windows) Update(pod string, change func(*Bounds)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.set[pod]
	change(&b)
	w.set[pod] = b
	w.pushLocked(pod, b)
}

// SetWindow sets pod's window (control.Windows).
func (w *Windows) SetWindow(pod string, limit int) {
	w.Update(pod, func(b *Bounds) { b.Window = limit })
}

// SetMemoryBudget sets pod's memory budget (control.Windows).
func (w *Windows) SetMemoryBudget(pod string, budget int64) {
	w.Update(pod, func(b *Bounds) { b.MemoryBudget = budget })
}

// SetTokenLimit sets pod's token limit (control.Windows).
func (w *Windows) SetTokenLimit(pod string, limit int64) {
	w.Update(pod, func(b *Bounds) { b.TokenLimit = limit })
}

// Drop forgets a removed pod's bounds and its window.
func (w *Windows) Drop(pod string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.set, pod)
	w.q.RemoveWindow(pod)
}

// Reshare pushes every pod's bounds again: the Cluster's OnShares.
func (w *Windows) Reshare() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pushAllLocked()
}

func (w *Windows) pushAllLocked() {
	for pod, b := range w.set {
		w.pushLocked(pod, b)
	}
}

// pushLocked sets the queue's window, memory budget and token limit for
// pod: b, or this replica's part of it when shared and scaled. w.mu is held.
func (w *Windows) pushLocked(pod string, b Bounds) {
	limit, budget, tokens := b.Window, b.MemoryBudget, b.TokenLimit
	if w.shared != nil && w.scaled() {
		limit, budget, tokens = w.shared.Scale(pod, limit, budget, tokens)
	}
	w.q.SetWindow(pod, limit)
	w.q.SetMemoryBudget(pod, budget)
	w.q.SetTokenLimit(pod, tokens)
}

// Demand is the Cluster's Settings.Demand: per pod, the slots in flight
// and the waiters spread evenly over the pods (a waiter may take any pod
// its request fits), in units of the pod's window as the slow breaker sets
// it.
func (w *Windows) Demand() map[string]Demand {
	var l Load
	if w.load != nil {
		l = w.load() // before w.mu: it takes the queue's lock
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d := make(map[string]Demand, len(l.InFlight))
	n := max(1, len(l.InFlight))
	waiting := (l.Waiting + n - 1) / n
	for pod, inflight := range l.InFlight {
		d[pod] = Demand{inFlight: inflight, waiting: waiting, window: w.set[pod].Window}
	}
	return d
}
