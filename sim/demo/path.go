package demo

import (
	"sync"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// Path is what the demo pod went through so far: the peaks of its
// fragmentation and KV-cache readings and the time gatekeeper held it at
// each level.
type Path struct {
	// PeakFragmentation and PeakKVCacheUsage are the highest readings;
	// HasFragmentation and HasKVCacheUsage whether any was read.
	PeakFragmentation, PeakKVCacheUsage float64
	HasFragmentation, HasKVCacheUsage   bool
	// Degraded and Critical are the time spent at those levels.
	Degraded, Critical time.Duration
}

// PathRecorder accumulates a Path from the pressure rounds. The zero value
// is ready to use; safe for concurrent use; must not be copied.
type PathRecorder struct {
	// mu guards the fields below.
	mu    sync.Mutex
	path  Path
	last  time.Time // the previous round; zero before the first
	level string    // the level since last
}

// Observe records one round at now: the pod's level ("normal", "degraded",
// "critical") and its signals. The time since the previous round counts
// toward the level that round reported.
func (r *PathRecorder) Observe(now time.Time, level string, signals map[pressure.Signal]pressure.Value) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && now.After(r.last) {
		switch d := now.Sub(r.last); r.level {
		case "degraded":
			r.path.Degraded += d
		case "critical":
			r.path.Critical += d
		}
	}
	r.last, r.level = now, level
	if v, ok := signals[pressure.Fragmentation]; ok {
		r.path.PeakFragmentation = max(r.path.PeakFragmentation, v.Value)
		r.path.HasFragmentation = true
	}
	if v, ok := signals[pressure.KVCacheUsage]; ok {
		r.path.PeakKVCacheUsage = max(r.path.PeakKVCacheUsage, v.Value)
		r.path.HasKVCacheUsage = true
	}
}

// Path returns what was recorded so far.
func (r *PathRecorder) Path() Path {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.path
}
