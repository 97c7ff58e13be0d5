package pressure

import (
	"context"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
)

// RunnerSettings configures a Runner. The zero value is valid.
type RunnerSettings struct {
	// Logger is handed to every Monitor the Runner builds, and receives the
	// error line of a Monitor whose Run fails. Nil means discard.
	Logger *slog.Logger
	// OnUpdate is handed to every Monitor the Runner builds (see
	// Settings.OnUpdate). Nil means none.
	OnUpdate func(State)
}

// Runner owns the running Monitor and replaces it when a reload changes
// what it reads. It splits the replacement in two, so a caller can build
// and check a whole new policy before changing anything: Prepare builds the
// Monitor (the step that may fail), Start swaps it in (it cannot fail).
// Create one with NewRunner. Safe for concurrent use; must not be copied.
type Runner struct {
	log      *slog.Logger
	onUpdate func(State)
	current  atomic.Pointer[Monitor]

	// mu guards settings, cancel and done.
	mu       sync.Mutex
	settings Settings
	cancel   context.CancelFunc
	done     chan struct{}
}

// NewRunner returns a Runner with no Monitor running.
func NewRunner(s RunnerSettings) *Runner {
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{log: s.Logger, onUpdate: s.OnUpdate}
}

// Snapshot returns the latest State of the running Monitor, empty before
// one has started. It never waits on I/O.
func (r *Runner) Snapshot() State {
	if m := r.current.Load(); m != nil {
		return m.Snapshot()
	}
	return State{}
}

// Notify asks the running Monitor for an OnUpdate call (Monitor.Notify).
// It never blocks; before Start it does nothing.
func (r *Runner) Notify() {
	if m := r.current.Load(); m != nil {
		m.Notify()
	}
}

// Apply is Prepare then Start: it starts a Monitor for s under ctx,
// replacing the running one only when the settings differ. A Monitor that
// cannot be built is an error and the old one keeps running.
func (r *Runner) Apply(ctx context.Context, s Settings) error {
	m, err := r.Prepare(s)
	if err != nil {
		return err
	}
	r.Start(ctx, m, s)
	return nil
}

// Prepare builds the Monitor for s without starting it; nil when s is what
// runs already (reflect.DeepEqual: settings holding a func, such as Now,
// never match). s's Logger and OnUpdate are replaced by the Runner's.
// Nothing running changes.
func (r *Runner) Prepare(s Settings) (*Monitor, error) {
	r.mu.Lock()
	same := r.done != nil && reflect.DeepEqual(r.settings, s)
	r.mu.Unlock()
	if same {
		return nil, nil
	}
	full := s
	full.Logger = r.log
	full.OnUpdate = r.onUpdate
	return New(full)
}

// Start replaces the running Monitor with m, built by Prepare for s, and
// runs m under ctx until Stop, the next Start with a non-nil Monitor, or
// the end of ctx. It stops the old Monitor and waits for it first. A nil m
// keeps the running one.
func (r *Runner) Start(ctx context.Context, m *Monitor, s Settings) {
	if m == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r.settings, r.cancel, r.done = s, cancel, done
	r.current.Store(m)
	go func() { // owned: stopLocked cancels it and waits for done
		defer close(done)
		if err := m.Run(mctx); err != nil {
			r.log.LogAttrs(mctx, slog.LevelError, "pressure monitor stopped", slog.String("err", err.Error()))
		}
	}()
}

// Stop ends the running Monitor and waits for its Run to return. Snapshot
// keeps returning its last State.
func (r *Runner) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

func (r *Runner) stopLocked() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.cancel, r.done = nil, nil
}
