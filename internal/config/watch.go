package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch defaults.
const (
	defaultDebounce = 250 * time.Millisecond
	defaultSettle   = 2 * time.Second
	defaultPoll     = 10 * time.Second
)

// WatchSettings configures a Watcher.
type WatchSettings struct {
	// Path is the policy file. Required. It may be a symlink, as in a
	// Kubernetes ConfigMap volume (config.yaml → ..data/config.yaml).
	Path string
	// OnChange is called after the file's content changed: when its bytes
	// differ from the last bytes seen (NewWatcher reads the first) and have
	// stayed the same for Settle. It runs
	// on Run's goroutine, one call at a time, so it should not block for
	// long; it usually reloads the file. Required.
	OnChange func()
	// OnError, if set, is told about trouble that does not stop watching:
	// fsnotify could not be set up or reported an error (changes are then
	// seen by polling only), or the file cannot be read (reported once until
	// it can be read again). It runs on Run's goroutine.
	OnError func(error)
	// Debounce is how long the directory must be quiet after an event
	// before the file is read, so a burst of events (an editor's save, a
	// ConfigMap swap) makes one check. 0 means DefaultDebounce.
	Debounce time.Duration
	// Settle is how long new content must stay the same before OnChange is
	// called: a file written in place in several parts (an editor, a
	// script's two echo >>) may be valid halfway, and applying its first
	// part would run a policy nobody wrote for a while. Read twice, Settle
	// apart, and equal both times, it is what the writer meant. 0 means
	// DefaultSettle.
	Settle time.Duration
	// Poll is the interval of the safety-net check of the file's content,
	// for events fsnotify misses (network file systems, a symlink whose
	// target lives in another directory). 0 means DefaultPoll.
	Poll time.Duration
}

// Watcher reports changes of a policy file's content. It watches the
// file's directory, not the file, so the atomic rename of a symlink (how
// kubelet updates a ConfigMap) is seen, and it checks the content on a
// timer as well, since fsnotify can miss events. Create one with
// NewWatcher, then call Run once. A Watcher must not be copied; only Close
// may be called while Run runs.
type Watcher struct {
	s      WatchSettings
	notify *fsnotify.Watcher // nil: polling only
	sum    [sha256.Size]byte // of the last content reported (OnChange)
	known  bool              // sum holds a content
	failed bool              // the last read failed and was reported
	// pending is new content seen once, to be reported when it reads the
	// same Settle later (hasPending).
	pending    [sha256.Size]byte
	hasPending bool
	close      sync.Once

	setupErr error // why notify is nil; reported when Run starts
}

// NewWatcher starts watching s.Path's directory and reads the file once:
// Run reports every change after that read. If fsnotify cannot be set up,
// the Watcher polls only and Run reports why through OnError. A file that
// cannot be read yet is not an error; its first readable content counts as
// a change. Call Run, or Close when Run will not be called.
func NewWatcher(s WatchSettings) (*Watcher, error) {
	if s.Path == "" {
		return nil, errors.New("config: WatchSettings.Path is empty")
	}
	if s.OnChange == nil {
		return nil, errors.New("config: WatchSettings.OnChange is nil")
	}
	if s.Debounce < 0 || s.Poll < 0 || s.Settle < 0 {
		return nil, fmt.Errorf("config: WatchSettings.Debounce (%v), Settle (%v) and Poll (%v) must not be negative", s.Debounce, s.Settle, s.Poll)
	}
	if s.Debounce == 0 {
		s.Debounce = defaultDebounce
	}
	if s.Settle == 0 {
		s.Settle = defaultSettle
	}
	if s.Poll == 0 {
		s.Poll = defaultPoll
	}
	w := &Watcher{s: s}
	if n, err := fsnotify.NewWatcher(); err != nil {
		w.setupErr = err
	} else if err := n.Add(filepath.Dir(s.Path)); err != nil {
		n.Close()
		w.setupErr = err
	} else {
		w.notify = n
	}
	if w.setupErr != nil {
		w.setupErr = fmt.Errorf("config: watch %s (falling back to polling every %v): %w", filepath.Dir(s.Path), s.Poll, w.setupErr)
	}
	if data, err := os.ReadFile(s.Path); err == nil {
		w.sum, w.known = sha256.Sum256(data), true
	}
	return w, nil
}

// Close releases the fsnotify watcher. Run closes it too; Close is for a
// Watcher whose Run is never called. It is safe to call more than once.
func (w *Watcher) Close() error {
	var err error
	w.close.Do(func() {
		if w.notify != nil {
			err = w.notify.Close()
		}
	})
	return err
}

// Run watches until ctx ends, then releases the watcher and returns nil.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.Close()
	if w.setupErr != nil {
		w.report(w.setupErr)
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.notify != nil {
		events, errs = w.notify.Events, w.notify.Errors
	}
	w.loop(ctx, events, errs)
	return nil
}

// loop is Run's body, taking the event channels so tests can feed them.
func (w *Watcher) loop(ctx context.Context, events <-chan fsnotify.Event, errs <-chan error) {
	poll := time.NewTicker(w.s.Poll)
	defer poll.Stop()
	debounce := time.NewTimer(w.s.Debounce)
	debounce.Stop()
	settle := time.NewTimer(w.s.Settle)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			debounce.Reset(w.s.Debounce) // any entry of the directory: the hash decides
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.report(fmt.Errorf("config: watch %s: %w", filepath.Dir(w.s.Path), err))
		case <-debounce.C:
			w.check(settle, false)
		case <-poll.C:
			w.check(settle, false)
		case <-settle.C:
			w.check(settle, true)
		}
	}
}

// check reads the file. Content that differs from the last reported is
// reported (OnChange) when it is the content seen Settle ago (settled: the
// settle timer fired) and unchanged since; otherwise it becomes the pending
// content and the settle timer starts again.
func (w *Watcher) check(settle *time.Timer, settled bool) {
	data, err := os.ReadFile(w.s.Path)
	if err != nil {
		if !w.failed {
			w.failed = true
			w.report(fmt.Errorf("config: read %s: %w", w.s.Path, err))
		}
		return
	}
	w.failed = false
	sum := sha256.Sum256(data)
	switch {
	case w.known && bytes.Equal(sum[:], w.sum[:]):
		w.hasPending = false // back to what was reported
		settle.Stop()
	case settled && w.hasPending && bytes.Equal(sum[:], w.pending[:]):
		w.sum, w.known, w.hasPending = sum, true, false
		w.s.OnChange()
	case !w.hasPending || !bytes.Equal(sum[:], w.pending[:]):
		w.pending, w.hasPending = sum, true
		settle.Reset(w.s.Settle)
	}
}

func (w *Watcher) report(err error) {
	if w.s.OnError != nil {
		w.s.OnError(err)
	}
}

// watch watches path with the default debounce and poll intervals and
// calls onChange after each change of its content, until ctx ends; see
// Watcher. It returns an error only for invalid arguments.
func watch(ctx context.Context, path string, onChange func()) error {
	w, err := NewWatcher(WatchSettings{Path: path, OnChange: onChange})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}
