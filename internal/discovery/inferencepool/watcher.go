package inferencepool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Options configures a Watcher.
type Options struct {
	// Dynamic reads InferencePools and pods, both as unstructured objects;
	// it is the only client a Watcher needs (ClientsFromConfig builds it).
	// Required.
	Dynamic dynamic.Interface
	// Refs are the pools to watch; duplicates count once. Empty is valid:
	// SetRefs may name pools later.
	Refs []Ref
	// OnChange receives each new snapshot, one call at a time, on Run's
	// goroutine. Required. Changes that arrive while it runs are folded
	// into the next call, so it should return promptly.
	OnChange func(Snapshot)
	// Logger receives failed lists and watches (Warn) and client-go's own
	// informer lines. Nil discards them.
	Logger *slog.Logger
	// resync is how often the informers replay their caches, a safety net
	// that recomputes (and, unchanged, delivers nothing). 0 means never;
	// negative is invalid.
	resync time.Duration
}

// Watcher follows InferencePools and their pods, and reports the pools'
// endpoints through Options.OnChange. Create one with New and call Run once.
// Its methods are safe for concurrent use; a Watcher must not be copied.
type Watcher struct {
	dyn      dynamic.Interface
	onChange func(Snapshot)
	log      *slog.Logger
	resync   time.Duration

	running atomic.Bool
	dirty   chan struct{} // capacity 1: something may have changed
	synced  chan struct{} // closed after the first complete snapshot

	// mu guards refs.
	mu   sync.Mutex
	refs []Ref
}

// New checks o and returns a Watcher that has not started.
func New(o Options) (*Watcher, error) {
	var errs []error
	if o.Dynamic == nil {
		errs = append(errs, errors.New("inferencepool: Dynamic: required"))
	}
	if o.OnChange == nil {
		errs = append(errs, errors.New("inferencepool: OnChange: required"))
	}
	if o.resync < 0 {
		errs = append(errs, fmt.Errorf("inferencepool: Resync: %v is negative", o.resync))
	}
	refs, err := cleanRefs("Refs", o.Refs)
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{
		dyn: o.Dynamic, onChange: o.OnChange, log: log, resync: o.resync,
		dirty: make(chan struct{}, 1), synced: make(chan struct{}), refs: refs,
	}, nil
}

// cleanRefs checks every ref names a pool and returns them sorted, once each.
func cleanRefs(field string, refs []Ref) ([]Ref, error) {
	var errs []error
	for i, r := range refs {
		if r.Namespace == "" {
			errs = append(errs, fmt.Errorf("inferencepool: %s[%d].Namespace: empty", field, i))
		}
		if r.Name == "" {
			errs = append(errs, fmt.Errorf("inferencepool: %s[%d].Name: empty", field, i))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out := slices.Clone(refs)
	slices.SortFunc(out, func(a, b Ref) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return slices.Compact(out), nil
}

// SetRefs replaces the pools to watch, as a policy reload may. Run starts
// informers for the new pools and namespaces and stops the unused ones; a
// new pool reads as not Found until its pool and pods have been listed, and
// a dropped one leaves the snapshot. Invalid refs change nothing.
func (w *Watcher) SetRefs(refs []Ref) error {
	clean, err := cleanRefs("refs", refs)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.refs = clean
	w.mu.Unlock()
	w.poke()
	return nil
}

// Synced returns a channel closed once the first complete snapshot (every
// ref given to New listed, pools and pods) has been delivered to OnChange.
// A pool or namespace that cannot be read (say, RBAC forbids it) holds it
// open; the failures are logged.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// HasSynced reports whether Synced is closed.
func (w *Watcher) HasSynced() bool {
	select {
	case <-w.synced:
		return true
	default:
		return false
	}
}

// Run watches until ctx ends, then returns nil after every informer
// goroutine has exited. It returns an error at once if called twice.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("inferencepool: Run called twice")
	}
	// client-go logs through the context's logger: point it at ours.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(w.log.Handler()))
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	src := newSources(w, &wg)
	var last Snapshot
	first := true
	for {
		w.mu.Lock()
		refs := w.refs
		w.mu.Unlock()
		if err := src.reconcile(ctx, refs); err != nil {
			return err
		}
		// The first delivery waits for every list, so that it is complete;
		// later ones show a pool added by SetRefs as not Found until read.
		if !first || src.ready() {
			snap := src.snapshot(refs)
			if first || !snap.Equal(last) {
				w.onChange(snap)
				last = snap
			}
			if first {
				first = false
				close(w.synced)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.dirty:
		}
	}
}

// poke asks Run's loop to recompute; pokes while one is pending fold into it.
func (w *Watcher) poke() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

// watchFailed replaces client-go's default handler so failures reach our
// logger with our message. A watch that ends or expires is relisted at once
// and is no fault.
func (w *Watcher) watchFailed(ctx context.Context, _ *cache.Reflector, err error) {
	level := slog.LevelWarn
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		level = slog.LevelDebug
	}
	w.log.LogAttrs(ctx, level, "inferencepool watch failed", slog.String("err", err.Error()))
}
