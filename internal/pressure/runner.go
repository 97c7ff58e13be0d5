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
// Monitor (the step that may fail), Replace swaps it in (it cannot fail).
// The Runner owns the context its Monitors run under: Start hands it over
// once, and every Monitor swapped in, before or after, runs under it.
// Create one with NewRunner. Safe for concurrent use; must not be copied.
type Runner struct {
	log      *slog.Logger
	onUpdate func(State)
	current  atomic.Pointer[Monitor]

	// mu guards the fields below.
	mu       sync.Mutex
	ctx      context.Context // nil until Start
	settings Settings        // current's
	pending  bool            // current is set and waits for Start
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

// Snapshot returns the latest State of the current Monitor, empty before
// one has run. It never waits on I/O.
func (r *Runner) Snapshot() State {
	if m := r.current.Load(); m != nil {
		return m.snapshot()
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

// Start runs the current Monitor, and every one Replace swaps in from now
// on, under ctx: they stop when ctx ends. Call it once; later calls do
// nothing.
func (r *Runner) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx != nil {
		return
	}
	r.ctx = ctx
	if m := r.current.Load(); m != nil && r.pending {
		r.runLocked(m)
	}
}

// Apply is Prepare then Replace: it swaps in a Monitor for s, replacing the
// current one only when the settings differ. A Monitor that cannot be
// built is an error and the old one stays.
func (r *Runner) Apply(s Settings) error {
	m, err := r.Prepare(s)
	if err != nil {
		return err
	}
	r.Replace(m, s)
	return nil
}

// Prepare builds the Monitor for s without starting it; nil when s is what
// runs (or waits for Start) already (reflect.DeepEqual: settings holding a
// func, such as Now, never match). s's Logger and OnUpdate are replaced by
// the Runner's. Nothing running changes.
func (r *Runner) Prepare(s Settings) (*Monitor, error) {
	r.mu.Lock()
	same := (r.done != nil || r.pending) && reflect.DeepEqual(r.settings, s)
	r.mu.Unlock()
	if same {
		return nil, nil
	}
	full := s
	full.Logger = r.log
	full.OnUpdate = r.onUpdate
	return New(full)
}

// Replace makes m, built by Prepare for s, the current Monitor. After Start
// it stops the running Monitor, waits for it, and runs m under Start's
// context until Stop, the next Replace with a non-nil Monitor, or the end of
// that context; before Start, m waits for it. A nil m keeps the current one.
func (r *Runner) Replace(m *Monitor, s Settings) {
	if m == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
	r.settings = s
	r.current.Store(m)
	if r.ctx == nil {
		r.pending = true
		return
	}
	r.runLocked(m)
}

// runLocked runs m under r.ctx. r.mu is held.
func (r *Runner) runLocked(m *Monitor) {
	mctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	r.cancel, r.done, r.pending = cancel, done, false
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
	r.pending = false
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.cancel, r.done = nil, nil
}
