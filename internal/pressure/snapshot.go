package pressure

import (
	"slices"
	"time"
)

// snapshot returns the latest State, built from the last good reading of
// every source, with ages and staleness as of now. It never waits on I/O.
func (m *Monitor) snapshot() State {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.snapshotLocked(m.s.Now())
}

// snapshotLocked builds the State at now; m.mu must be held.
func (m *Monitor) snapshotLocked(now time.Time) State {
	st := State{At: now, Sources: make([]SourceState, 0, len(m.sources)),
		Upstreams: make([]UpstreamState, 0, len(m.upstreams))}
	for _, e := range m.sources {
		since := e.lastSuccess
		if since.IsZero() {
			since = m.started
		}
		st.Sources = append(st.Sources, SourceState{
			Name: e.name, Kind: e.kind, Upstream: e.upstream, Up: e.up,
			LastSuccess: e.lastSuccess, LastError: e.lastErr,
			Stale:         now.Sub(since) > m.s.StaleAfter,
			NeverAnswered: e.tried && e.lastSuccess.IsZero(),
		})
	}
	var nodes []*entry
	for _, e := range m.sources {
		if e.upstream == "" {
			nodes = append(nodes, e)
		}
	}
	for _, u := range m.upstreams {
		st.Upstreams = append(st.Upstreams, m.upstreamState(u, nodes, now))
	}
	return st
}

// upstreamState gathers u's values from its own sources and the node
// sources that read its GPUs.
func (m *Monitor) upstreamState(u upstream, nodes []*entry, now time.Time) UpstreamState {
	us := UpstreamState{Name: u.name, Signals: map[Signal]Value{}}
	gpus := map[string]*GPUState{}
	for _, e := range slices.Concat(nodes, u.own) {
		if e.lastSuccess.IsZero() {
			continue
		}
		age := now.Sub(e.lastSuccess)
		val := func(v float64, gpu string) Value {
			return Value{Value: v, Source: e.name, GPU: gpu, At: e.lastSuccess,
				Age: age, Stale: age > m.s.StaleAfter}
		}
		if e.upstream != "" {
			for sig, v := range e.reading.Values {
				merge(us.Signals, sig, val(v, ""))
			}
		}
		for _, g := range e.reading.GPUs {
			if e.filter && !u.gpus[g.ID] && (g.UUID == "" || !u.gpus[g.UUID]) {
				continue
			}
			gs := gpus[g.ID]
			if gs == nil {
				gs = &GPUState{ID: g.ID, Signals: map[Signal]Value{}}
				gpus[g.ID] = gs
			}
			if gs.UUID == "" {
				gs.UUID = g.UUID
			}
			for sig, v := range g.Values {
				merge(gs.Signals, sig, val(v, g.ID))
			}
		}
	}
	for _, gs := range gpus {
		us.GPUs = append(us.GPUs, *gs)
	}
	slices.SortFunc(us.GPUs, func(a, b GPUState) int { return compareIDs(a.ID, b.ID) })
	for _, gs := range us.GPUs {
		for sig, v := range gs.Signals {
			merge(us.Signals, sig, v)
		}
	}
	for _, sig := range Signals() {
		if _, ok := us.Signals[sig]; !ok {
			us.Absent = append(us.Absent, sig)
		}
	}
	return us
}

// merge keeps in vals[sig] the better of its value and v: a fresh value
// beats a stale one, then the worse value for the breaker wins; ties keep
// the first.
func merge(vals map[Signal]Value, sig Signal, v Value) {
	cur, ok := vals[sig]
	switch {
	case !ok:
	case v.Stale != cur.Stale:
		if v.Stale {
			return
		}
	case !sig.worse(v.Value, cur.Value):
		return
	}
	vals[sig] = v
}
