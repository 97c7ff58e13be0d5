package policy

import (
	"context"
	"log/slog"
	"os"
	"sync"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// fileWatch is the policy file's watcher and its signal: buffered,
// coalescing.
type fileWatch struct {
	w       *config.Watcher // nil when running the embedded default
	changed chan struct{}
}

// WatchFile starts watching the policy file right after it was loaded, so
// an edit made from now on is seen (the watcher remembers this content).
// Call it once, before Watch; Close ends it.
func (k *Keeper) WatchFile() error {
	k.file.changed = make(chan struct{}, 1)
	if k.o.Path == "" {
		return nil
	}
	w, err := config.NewWatcher(config.WatchSettings{
		Path: k.o.Path,
		OnChange: func() {
			select {
			case k.file.changed <- struct{}{}:
			default:
			}
		},
		OnError: func(err error) {
			k.o.Log.LogAttrs(context.Background(), slog.LevelWarn, "policy file watch trouble; SIGHUP still reloads",
				slog.String("err", err.Error()))
		},
	})
	if err != nil {
		return err
	}
	k.file.w = w
	return nil
}

// Watch reloads on hup (SIGHUP) and when the file changes (a ConfigMap
// symlink swap included) until ctx ends.
func (k *Keeper) Watch(ctx context.Context, hup <-chan os.Signal) {
	var wg sync.WaitGroup
	if k.file.w != nil {
		wg.Go(func() { _ = k.file.w.Run(ctx) })
	}
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			k.Reload("sighup")
		case <-k.file.changed:
			k.Reload("file_change")
		}
	}
}

// Close releases the file watcher.
func (k *Keeper) Close() {
	if k.file.w != nil {
		_ = k.file.w.Close()
	}
}
