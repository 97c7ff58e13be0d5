package cluster

import (
	"maps"
	"sync"
	"testing"
)

// fakeQueue records what Windows pushes.
type fakeQueue struct {
	mu      sync.Mutex
	windows map[string]Bounds
}

func (q *fakeQueue) update(pod string, f func(*Bounds)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.windows == nil {
		q.windows = map[string]Bounds{}
	}
	b := q.windows[pod]
	f(&b)
	q.windows[pod] = b
}
func (q *fakeQueue) SetWindow(p string, l int) { q.update(p, func(b *Bounds) { b.Window = l }) }
func (q *fakeQueue) SetMemoryBudget(p string, v int64) {
	q.update(p, func(b *Bounds) { b.MemoryBudget = v })
}
func (q *fakeQueue) SetTokenLimit(p string, v int64) {
	q.update(p, func(b *Bounds) { b.TokenLimit = v })
}
func (q *fakeQueue) RemoveWindow(p string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.windows, p)
}
func (q *fakeQueue) get(p string) (Bounds, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b, ok := q.windows[p]
	return b, ok
}

func TestWindowsAloneShareAndDrop(t *testing.T) {
	t.Parallel()
	q := &fakeQueue{}
	scaled := true
	w := NewWindows(WindowsSettings{Queue: q, Scaled: func() bool { return scaled },
		Load: func() Load { return Load{Waiting: 3, InFlight: map[string]int{"a": 4, "b": 1}} }})
	w.SetWindow("a", 10)
	w.SetMemoryBudget("a", 1000) // the budget keeps the window a reload set
	w.SetTokenLimit("a", 500)
	if got, _ := q.get("a"); got != (Bounds{Window: 10, MemoryBudget: 1000, TokenLimit: 500}) {
		t.Fatalf("alone: queue holds %+v, want every bound whole", got)
	}
	w.SetWindow("b", 6)
	want := map[string]Demand{"a": {inFlight: 4, waiting: 2, window: 10}, "b": {inFlight: 1, waiting: 2, window: 6}}
	if got := w.Demand(); !maps.Equal(got, want) {
		t.Errorf("Demand() = %+v, want %+v (3 waiters spread over 2 pods, rounded up)", got, want)
	}

	// Shared: a declared pod with no grant yet gets nothing.
	c, err := New(Settings{URL: "redis://127.0.0.1:1/0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	c.SetPods(map[string]int{"a": 10, "b": 6})
	w.ShareWith(c)
	if got, _ := q.get("a"); got.Window != 0 || got.MemoryBudget != 1 || got.TokenLimit != 1 {
		t.Errorf("shared without a grant: queue holds %+v, want window 0, budgets 1", got)
	}
	scaled = false // observe mode: nothing scaled
	w.Reshare()
	if got, _ := q.get("a"); got.Window != 10 {
		t.Errorf("observe: queue holds %+v, want the whole window", got)
	}

	w.Drop("b")
	if _, ok := q.get("b"); ok {
		t.Error("Drop left b's window in the queue")
	}
	if _, ok := w.Demand()["b"]; !ok {
		t.Error("Demand() lost b, which the queue's load still names") // Load reports it; Window is 0 now
	}
	if got := w.Demand()["b"].window; got != 0 {
		t.Errorf("Demand()[b].Window after Drop = %d, want 0", got)
	}
}

// TestWindowsConcurrent hammers Windows from many goroutines.
func TestWindowsConcurrent(t *testing.T) {
	t.Parallel()
	q := &fakeQueue{}
	w := NewWindows(WindowsSettings{Queue: q, Load: func() Load { return Load{InFlight: map[string]int{"a": 1}} }})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				w.SetWindow("a", i+j)
				w.SetMemoryBudget("a", int64(j))
				w.Reshare()
				_ = w.Demand()
			}
		})
	}
	wg.Wait()
}
