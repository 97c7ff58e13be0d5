package main

import (
	"sync"

	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// bound is what the slow breaker last set for one pod: its window and, 0
// meaning none, its memory budget and token limit.
type bound struct {
	limit          int
	budget, tokens int64
}

// bounds holds each pod's bound and pushes this replica's part of it to
// the queue: all of it alone; in cluster mode the part its lease holds
// (cluster.Scale), again whenever the lease moves. Pushing under mu keeps
// the queue's values in the order they were decided.
type bounds struct {
	mu  sync.Mutex
	set map[string]bound
}

// updateBound changes name's bound in place (the zero bound when none is
// set) and pushes this replica's part of it, under one lock: the slow
// path sets the budgets and a reload the window of the same bound, and
// neither may undo the other.
func (a *app) updateBound(name string, change func(*bound)) {
	a.bounds.mu.Lock()
	defer a.bounds.mu.Unlock()
	if a.bounds.set == nil {
		a.bounds.set = map[string]bound{}
	}
	b := a.bounds.set[name]
	change(&b)
	a.bounds.set[name] = b
	a.pushBound(name, b)
}

// dropBound forgets a removed pod's bound and window.
func (a *app) dropBound(name string) {
	a.bounds.mu.Lock()
	defer a.bounds.mu.Unlock()
	delete(a.bounds.set, name)
	a.queue.RemoveWindow(name)
}

// reshare pushes every pod's bound again: the cluster's OnShares.
func (a *app) reshare() {
	a.bounds.mu.Lock()
	defer a.bounds.mu.Unlock()
	for name, b := range a.bounds.set {
		a.pushBound(name, b)
	}
}

// pushBound sets the queue's window, memory budget and token limit for
// name: b, or this replica's part of it in cluster mode. Observe mode
// shares nothing (it bounds nothing either). a.bounds.mu is held.
func (a *app) pushBound(name string, b bound) {
	limit, budget, tokens := b.limit, b.budget, b.tokens
	if a.shared != nil && a.cfg().Mode != config.ModeObserve {
		limit, budget, tokens = a.shared.c.Scale(name, limit, budget, tokens)
	}
	a.queue.SetWindow(name, limit)
	a.queue.SetMemoryBudget(name, budget)
	a.queue.SetTokenLimit(name, tokens)
}

// demand is the cluster's Settings.Demand: per pod, the slots in flight
// and the waiters spread evenly over the pods (a waiter may take any pod
// its request fits), in units of the pod's window as the slow breaker
// sets it.
func (a *app) demand() map[string]cluster.Demand {
	st := a.queue.Stats()
	a.bounds.mu.Lock()
	defer a.bounds.mu.Unlock()
	d := make(map[string]cluster.Demand, len(st.Windows))
	n := max(1, len(st.Windows))
	waiting := (st.Length + n - 1) / n
	for _, w := range st.Windows {
		d[w.Name] = cluster.Demand{InFlight: w.InFlight, Waiting: waiting, Window: a.bounds.set[w.Name].limit}
	}
	return d
}
