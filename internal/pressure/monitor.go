package pressure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Monitor polls sources and keeps the latest State. Create one with New,
// start it with Run, read it with Snapshot. Safe for concurrent use; must
// not be copied.
type Monitor struct {
	s         Settings
	sources   []*entry   // node sources first, then each upstream's; fixed after New
	upstreams []upstream // fixed after New
	notify    chan struct{}
	running   atomic.Bool
	ownClient bool // s.HTTPClient is ours: close its idle connections when Run ends

	// mu guards started, polled and the mutable fields of every entry.
	mu      sync.RWMutex
	started time.Time
	polled  bool // PollAt has set started

	// roundMu guards unreported.
	roundMu    sync.Mutex
	unreported map[*entry]bool // the sources the current round still waits for
}

// upstream is an upstream's fixed wiring.
type upstream struct {
	name string
	gpus map[string]bool // index or UUID
	own  []*entry
}

// entry is one source and what the Monitor knows of it.
type entry struct {
	src      Source
	name     string
	kind     Kind
	upstream string // "" for a node source
	filter   bool   // keep only GPUs the upstream lists
	timeout  time.Duration
	derive   *deriver // owned by the goroutine that reads the source

	// Guarded by Monitor.mu.
	reading     Reading // the last good reading, derived signals included
	lastSuccess time.Time
	tried       bool
	up          bool
	lastErr     string
}

// New builds a Monitor from s. Invalid settings make it return an error
// naming every offending field. New makes no I/O: NVML is initialised at the
// first read.
func New(s Settings) (*Monitor, error) {
	s, err := s.withDefaults()
	errs := []error{err}
	m := &Monitor{s: s, notify: make(chan struct{}, 1), started: s.Now(), ownClient: s.HTTPClient == nil}
	if m.ownClient {
		m.s.HTTPClient = newHTTPClient()
	}
	names := map[string]bool{}
	for i, ss := range s.Sources {
		e, err := m.newEntry(ss, "", fmt.Sprintf("sources[%d]", i), names)
		errs = append(errs, err)
		if e != nil {
			e.filter = true
			m.sources = append(m.sources, e)
		}
	}
	seen := map[string]bool{}
	for i, us := range s.Upstreams {
		path := fmt.Sprintf("upstreams[%d]", i)
		if us.Name == "" || seen[us.Name] {
			errs = append(errs, fmt.Errorf("pressure: %s.name %q: must be unique and not empty", path, us.Name))
		}
		seen[us.Name] = true
		u := upstream{name: us.Name, gpus: map[string]bool{}}
		for _, g := range us.GPUs {
			u.gpus[g] = true
		}
		for j, ss := range us.Sources {
			e, err := m.newEntry(ss, us.Name, fmt.Sprintf("%s.sources[%d]", path, j), names)
			errs = append(errs, err)
			if e != nil {
				e.filter = len(us.GPUs) > 0 && (e.kind == KindNVML || e.kind == KindDCGM)
				u.own = append(u.own, e)
				m.sources = append(m.sources, e)
			}
		}
		m.upstreams = append(m.upstreams, u)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// newEntry builds one source with a unique name; upstream is "" for a node
// source.
func (m *Monitor) newEntry(ss SourceSettings, upstream, path string, names map[string]bool) (*entry, error) {
	name := ss.Name
	if name == "" && ss.Source != nil {
		name = ss.Source.Name()
	}
	if name == "" {
		base := string(ss.Kind)
		if upstream != "" {
			base = upstream + "/" + base
		}
		name = base
		for n := 2; names[name]; n++ {
			name = fmt.Sprintf("%s#%d", base, n)
		}
	}
	if names[name] {
		return nil, fmt.Errorf("pressure: %s.name %q: already used", path, name)
	}
	names[name] = true
	e := &entry{src: ss.Source, name: name, kind: ss.Kind, upstream: upstream, timeout: ss.Timeout,
		derive: newDeriver(m.s.Smoothing)}
	if e.src != nil {
		return e, nil
	}
	client := m.s.HTTPClient
	needURL := func() error {
		u, err := url.Parse(ss.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("pressure: %s.url %q: must be an http(s) URL", path, ss.URL)
		}
		return nil
	}
	switch ss.Kind {
	case KindNVML:
		e.src = newNVML(name, m.s.NVML, m.s.Now) // without the nvml build tag, one that says so
	case KindVLLM:
		if upstream == "" {
			return nil, fmt.Errorf("pressure: %s.kind %q: must be listed under an upstream", path, ss.Kind)
		}
		e.src = newVLLMSource(name, ss.URL, client)
	case KindDCGM:
		e.src = newDCGMSource(name, ss.URL, client)
	case KindMemoryBlocks:
		e.src = newMemoryBlocksSource(name, ss.URL, client)
	default:
		return nil, fmt.Errorf("pressure: %s.kind %q: unknown (want nvml, vllm, dcgm or memory_blocks)", path, ss.Kind)
	}
	if ss.Kind != KindNVML {
		if err := needURL(); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Run polls every source on its own goroutine until ctx ends, so a slow or
// hanging source never delays another, and calls Settings.OnUpdate once
// per round (notifyLoop). It returns after all its goroutines have exited and the sources
// that implement io.Closer are closed, with their close errors. A source
// whose Read ignores ctx delays Run's return. Call Run once.
func (m *Monitor) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("pressure: Run called twice")
	}
	m.mu.Lock()
	m.started = m.s.Now()
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range m.sources {
		wg.Go(func() { m.poll(ctx, e) })
	}
	if m.s.OnUpdate != nil {
		wg.Go(func() { m.notifyLoop(ctx) })
	}
	wg.Wait()
	if m.ownClient {
		m.s.HTTPClient.CloseIdleConnections()
	}
	var errs []error
	for _, e := range m.sources {
		if c, ok := e.src.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// poll reads one source every Interval (± Jitter/2) until ctx ends.
func (m *Monitor) poll(ctx context.Context, e *entry) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := m.s.Now()
		rd, err := m.read(ctx, e)
		if ctx.Err() != nil {
			return // shutting down: the failure is ours, not the source's
		}
		now := m.s.Now()
		m.record(ctx, e, rd, err, now)
		m.reported(e)
		wait := m.s.Interval - now.Sub(start)
		if m.s.Jitter > 0 {
			wait += rand.N(m.s.Jitter) - m.s.Jitter/2
		}
		t.Reset(max(wait, 0))
	}
}

// read takes one reading of e under its timeout.
func (m *Monitor) read(ctx context.Context, e *entry) (Reading, error) {
	timeout := m.s.Timeout
	if e.timeout > 0 {
		timeout = e.timeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return e.src.Read(rctx)
}

// PollAt reads every source once, in order, on the caller's goroutine, as
// if the reads completed at now, and returns the State at now. It is Run's
// step for a caller on a virtual clock (the replay): the same derivation,
// staleness and merging as Run, no goroutine, no timer. Do not use it on a
// Monitor that Runs. OnUpdate is not called.
func (m *Monitor) PollAt(ctx context.Context, now time.Time) State {
	m.mu.Lock()
	if !m.polled {
		m.polled, m.started = true, now
	}
	m.mu.Unlock()
	for _, e := range m.sources {
		rd, err := m.read(ctx, e)
		m.record(ctx, e, rd, err, now)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.snapshotLocked(now)
}

// record derives and stores one read's outcome, then logs a change of
// up/down outside the lock.
func (m *Monitor) record(ctx context.Context, e *entry, rd Reading, err error, now time.Time) {
	if err == nil {
		rd = e.derive.derive(rd, now)
	}
	m.mu.Lock()
	wasUp, tried := e.up, e.tried
	e.tried = true
	if err == nil {
		e.reading, e.lastSuccess, e.up, e.lastErr = rd, now, true, ""
	} else {
		e.up, e.lastErr = false, err.Error()
	}
	m.mu.Unlock()
	switch {
	case err != nil && !tried:
		// Logged once: a source that never answered is a configuration
		// problem (a wrong URL, no exporter in the pod, no driver), shown in
		// State and metrics; it does not count as pressure until it answers.
		m.s.Logger.LogAttrs(ctx, slog.LevelWarn, "pressure source has not answered yet; it counts toward no level until it does",
			slog.String("source", e.name), slog.String("upstream", e.upstream),
			slog.String("state", "never_answered"), slog.String("err", err.Error()))
	case err != nil && wasUp:
		m.s.Logger.LogAttrs(ctx, slog.LevelWarn, "pressure source down",
			slog.String("source", e.name), slog.String("upstream", e.upstream),
			slog.String("state", "down"), slog.String("err", err.Error()))
	case err == nil && tried && !wasUp:
		m.s.Logger.LogAttrs(ctx, slog.LevelInfo, "pressure source up",
			slog.String("source", e.name), slog.String("upstream", e.upstream),
			slog.String("state", "up"))
	}
}

// Notify asks for an OnUpdate call with the current Snapshot now, before
// the round's sources have all reported: the caller learnt something the
// next round should act on at once (a pod refusing requests itself). It
// never blocks; calls made while one is pending are coalesced into it. It
// does not end the round in progress. Without OnUpdate it has no effect.
func (m *Monitor) Notify() { m.wake() }

// reported counts e's report (an answer or a failure, its timeout
// included) in the current round; the last source to report ends the
// round, and OnUpdate runs once for it.
func (m *Monitor) reported(e *entry) {
	m.roundMu.Lock()
	if m.unreported == nil {
		m.refillLocked()
	}
	delete(m.unreported, e)
	done := len(m.unreported) == 0
	if done {
		m.refillLocked()
	}
	m.roundMu.Unlock()
	if done {
		m.wake()
	}
}

// refillLocked starts a round that waits for every source. roundMu is held.
func (m *Monitor) refillLocked() {
	m.unreported = make(map[*entry]bool, len(m.sources))
	for _, e := range m.sources {
		m.unreported[e] = true
	}
}

// wake tells the OnUpdate loop that a round ended or Notify was called.
func (m *Monitor) wake() {
	select {
	case m.notify <- struct{}{}:
	default: // an update is already pending; it will see this one
	}
}

// notifyLoop calls OnUpdate once per round: after every source has
// reported since the last round (each read is bounded by its timeout), so
// sources read at slightly different moments make one round per Interval,
// not one per source; and at once after Notify. A source that has not
// reported for StaleAfter is stale: the round goes on without it. A Monitor
// without sources has no reports, yet its caller's rounds must go on (the
// controller's built-in pod_overload signal, fed by the pods' answers, is
// read and left only at rounds): it calls OnUpdate every Interval instead.
func (m *Monitor) notifyLoop(ctx context.Context) {
	every := m.s.StaleAfter
	if len(m.sources) == 0 {
		every = m.s.Interval
	}
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.notify:
		case <-t.C:
			m.roundMu.Lock()
			m.refillLocked() // those still out report into the next round
			m.roundMu.Unlock()
		}
		t.Reset(every)
		m.s.OnUpdate(m.snapshot())
	}
}
