package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fsnotify/fsnotify"
)

// generous bounds how long a real-time watcher test waits for an event
// that should come in milliseconds; it is a failure bound, not a sleep.
const generous = 10 * time.Second

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startWatcher runs a Watcher on path until the test ends and returns a
// channel that receives the file's content each time OnChange is called.
func startWatcher(t *testing.T, path string, s WatchSettings, pollOnly bool) <-chan string {
	t.Helper()
	changes := make(chan string, 16)
	s.Path = path
	s.OnChange = func() {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("OnChange: %v", err)
		}
		changes <- string(data)
	}
	w, err := NewWatcher(s)
	if err != nil {
		t.Fatal(err)
	}
	if pollOnly {
		w.Close()
		w.notify = nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
	return changes
}

func waitChange(t *testing.T, changes <-chan string, want string) {
	t.Helper()
	select {
	case got := <-changes:
		if got != want {
			t.Fatalf("OnChange saw %q, want %q", got, want)
		}
	case <-time.After(generous):
		t.Fatalf("no OnChange within %v", generous)
	}
}

func TestWatcherSeesWrite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, path, "mode: enforce\n")
	changes := startWatcher(t, path, WatchSettings{Debounce: 10 * time.Millisecond, Settle: 10 * time.Millisecond, Poll: time.Hour}, false)
	writeFile(t, path, "mode: observe\n")
	waitChange(t, changes, "mode: observe\n")
}

// TestWatcherSeesConfigMapSwap replays how kubelet updates a ConfigMap
// volume: config.yaml → ..data/config.yaml, ..data → a timestamped
// directory, and an update renames a new ..data symlink over the old one.
func TestWatcherSeesConfigMapSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mkVersion := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "config.yaml"), content)
	}
	mkVersion("..2026_01_01", "mode: enforce\n")
	for _, l := range [][2]string{{"..2026_01_01", "..data"}, {"..data/config.yaml", "config.yaml"}} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "config.yaml")
	changes := startWatcher(t, path, WatchSettings{Debounce: 10 * time.Millisecond, Settle: 10 * time.Millisecond, Poll: time.Hour}, false)

	mkVersion("..2026_01_02", "mode: observe\n")
	if err := os.Symlink("..2026_01_02", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_01_01")); err != nil {
		t.Fatal(err)
	}
	waitChange(t, changes, "mode: observe\n")
}

func TestWatcherPollsWithoutEvents(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, path, "a\n")
	changes := startWatcher(t, path, WatchSettings{Debounce: time.Hour, Settle: 5 * time.Millisecond, Poll: 5 * time.Millisecond}, true)
	writeFile(t, path, "b\n")
	waitChange(t, changes, "b\n")
}

// TestWatcherLoop drives the loop with fake events on a fake clock: bursts
// are debounced, new content is reported once it has settled, unchanged
// content is not reported, an unreadable file is reported once, polling
// finds what events missed, and a file written in place in two parts is
// reported whole, never its first part.
func TestWatcherLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		writeFile(t, path, "v1")
		var mu sync.Mutex // guards changes and errs
		var changes, errs []string
		w, err := NewWatcher(WatchSettings{
			Path:     path,
			Debounce: 100 * time.Millisecond,
			Settle:   200 * time.Millisecond,
			Poll:     time.Minute,
			OnChange: func() {
				data, _ := os.ReadFile(path)
				mu.Lock()
				changes = append(changes, string(data))
				mu.Unlock()
			},
			OnError: func(err error) {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		w.Close() // the real events are not used here
		events := make(chan fsnotify.Event)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { w.loop(ctx, events, nil); close(done) }()
		event := func() { events <- fsnotify.Event{Name: path, Op: fsnotify.Write} }
		state := func() (int, int, string) {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			last := ""
			if len(changes) > 0 {
				last = changes[len(changes)-1]
			}
			return len(changes), len(errs), last
		}
		steps := []struct {
			name    string
			act     func()
			wait    time.Duration
			changes int
			errs    int
			last    string
		}{
			{"event without change", event, time.Second, 0, 0, ""},
			{"burst of events", func() {
				writeFile(t, path, "v2")
				for range 5 {
					event()
					time.Sleep(50 * time.Millisecond) // inside the debounce window
				}
			}, 0, 0, 0, ""},
			{"debounce expires once: seen, not yet settled", nil, 100 * time.Millisecond, 0, 0, ""},
			{"settled: reported", nil, 200 * time.Millisecond, 1, 0, "v2"},
			{"change missed by events, found by poll", func() { writeFile(t, path, "v3") }, time.Minute + 200*time.Millisecond, 2, 0, "v3"},
			{"file gone: reported once", func() { os.Remove(path) }, 3 * time.Minute, 2, 1, "v3"},
			{"same content back: no change", func() { writeFile(t, path, "v3") }, time.Minute, 2, 1, "v3"},
			{"gone again: reported again", func() { os.Remove(path); event() }, time.Second, 2, 2, "v3"},
			{"new content", func() { writeFile(t, path, "v4"); event() }, time.Second, 3, 2, "v4"},
			{"first part of an in-place write: seen, not reported", func() { writeFile(t, path, "v5: part one"); event() },
				150 * time.Millisecond, 3, 2, "v4"},
			{"second part before it settled", func() { writeFile(t, path, "v5: part one, part two"); event() },
				150 * time.Millisecond, 3, 2, "v4"},
			{"the whole file, once settled", nil, time.Second, 4, 2, "v5: part one, part two"},
		}
		for _, st := range steps {
			if st.act != nil {
				st.act()
			}
			time.Sleep(st.wait)
			n, e, last := state()
			if n != st.changes || e != st.errs || last != st.last {
				t.Fatalf("%s: %d changes (last %q), %d errors; want %d (last %q), %d", st.name, n, last, e, st.changes, st.last, st.errs)
			}
		}
		cancel()
		<-done
		if !strings.Contains(errs[0], "config: read "+path) {
			t.Errorf("OnError got %q, want a read error naming the file", errs[0])
		}
	})
}

func TestNewWatcherErrors(t *testing.T) {
	t.Parallel()
	nop := func() {}
	for _, s := range []WatchSettings{
		{OnChange: nop},
		{Path: "x.yaml"},
		{Path: "x.yaml", OnChange: nop, Poll: -1},
	} {
		if _, err := NewWatcher(s); err == nil || !strings.HasPrefix(err.Error(), "config: ") {
			t.Errorf("NewWatcher(%+v) = %v, want a config: error", s, err)
		}
	}
}

// TestWatchFallsBackToPolling: a directory that does not exist yet cannot
// be watched by fsnotify; Watch still returns only when ctx ends, and the
// setup problem is reported through OnError.
func TestWatchFallsBackToPolling(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing", "config.yaml")
	reported := make(chan error, 4)
	w, err := NewWatcher(WatchSettings{Path: path, OnChange: func() {}, OnError: func(err error) { reported <- err }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case err := <-reported:
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "falling back to polling") {
			t.Errorf("OnError(%v), want the fsnotify setup error", err)
		}
	case <-time.After(generous):
		t.Fatal("no setup error reported")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	if err := watch(ctx, "", func() {}); err == nil {
		t.Errorf("Watch(\"\") = nil, want an error")
	}
}
