package main

import (
	"context"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/gatekeeper-dev/gatekeeper/config"
	"github.com/gatekeeper-dev/gatekeeper/pressure"
)

// pressureSettings maps the policy's sources onto pressure.Settings.
func pressureSettings(c *config.Config) pressure.Settings {
	s := pressure.Settings{
		Interval:   c.Pressure.Interval,
		StaleAfter: c.Pressure.StaleAfter,
	}
	for _, src := range c.Pressure.Sources {
		s.Sources = append(s.Sources, sourceSettings(src))
	}
	for _, u := range c.Upstreams {
		us := pressure.UpstreamSettings{Name: u.Name, GPUs: u.GPUs}
		for _, src := range u.Sources {
			us.Sources = append(us.Sources, sourceSettings(src))
		}
		s.Upstreams = append(s.Upstreams, us)
	}
	return s
}

// pressureSettings is pressureSettings(c) with the app's source client.
func (a *app) pressureSettings(c *config.Config) pressure.Settings {
	s := pressureSettings(c)
	s.HTTPClient = a.opts.sources
	return s
}

func sourceSettings(s config.Source) pressure.SourceSettings {
	return pressure.SourceSettings{Kind: pressure.Kind(s.Kind), URL: s.URL, Name: s.Name, Timeout: s.Timeout}
}

// pressureRunner owns the pressure monitor and restarts it when a reload
// changes what it reads. Safe for concurrent use; must not be copied.
type pressureRunner struct {
	log      *slog.Logger
	onUpdate func(pressure.State)
	current  atomic.Pointer[pressure.Monitor]

	// mu guards settings, cancel and done.
	mu       sync.Mutex
	settings pressure.Settings
	cancel   context.CancelFunc
	done     chan struct{}
}

// snapshot returns the latest readings of the running monitor, empty before
// the first one.
func (p *pressureRunner) snapshot() pressure.State {
	if m := p.current.Load(); m != nil {
		return m.Snapshot()
	}
	return pressure.State{}
}

// apply starts a monitor for s under ctx, replacing the running one only
// when the settings differ. A monitor that cannot be built is an error and
// the old one keeps running.
func (p *pressureRunner) apply(ctx context.Context, s pressure.Settings) error {
	m, err := p.prepare(s)
	if err != nil {
		return err
	}
	p.start(ctx, m, s)
	return nil
}

// prepare builds the monitor for s without starting it; nil when s is what
// runs already. Nothing running changes.
func (p *pressureRunner) prepare(s pressure.Settings) (*pressure.Monitor, error) {
	p.mu.Lock()
	same := p.done != nil && reflect.DeepEqual(p.settings, s)
	p.mu.Unlock()
	if same {
		return nil, nil
	}
	full := s
	full.Logger = p.log
	full.OnUpdate = p.onUpdate
	return pressure.New(full)
}

// start replaces the running monitor with m (built by prepare for s) under
// ctx; a nil m keeps the running one.
func (p *pressureRunner) start(ctx context.Context, m *pressure.Monitor, s pressure.Settings) {
	if m == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	p.settings, p.cancel, p.done = s, cancel, done
	p.current.Store(m)
	go func() { // owned: stop cancels it and waits for done
		defer close(done)
		if err := m.Run(mctx); err != nil {
			p.log.LogAttrs(mctx, slog.LevelError, "pressure monitor stopped", slog.String("err", err.Error()))
		}
	}()
}

// stop ends the running monitor and waits for it.
func (p *pressureRunner) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
}

func (p *pressureRunner) stopLocked() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	<-p.done
	p.cancel, p.done = nil, nil
}
