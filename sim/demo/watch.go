package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// Watch follows the demo pod through gatekeeper's pressure rounds: it logs
// the first reading from both pod sources, once; records the pod's path
// (Path); and adds that path to the summaries the load generator logs.
// Create one with NewWatch. Safe for concurrent use; must not be copied.
type Watch struct {
	log    *slog.Logger
	notify func(pressure.State)
	now    func() time.Time
	once   sync.Once
	path   PathRecorder
}

// NewWatch returns a Watch logging to log. notify, if set, hears every
// round (tests wait on it for the first reading); now is the clock of the
// path (time at each level), nil meaning time.Now.
func NewWatch(log *slog.Logger, notify func(pressure.State), now func() time.Time) *Watch {
	if now == nil {
		now = time.Now
	}
	return &Watch{log: log, notify: notify, now: now}
}

// Round is called after gatekeeper has acted on a pressure round: st is
// the round's readings, pod the demo upstream's state after it (nil when
// it is not listed).
func (w *Watch) Round(st pressure.State, pod *PodSummary) {
	if attrs, ok := Reading(st); ok {
		w.once.Do(func() {
			w.log.LogAttrs(context.Background(), slog.LevelInfo, "demo: first pressure reading", attrs...)
		})
	}
	if w.notify != nil {
		w.notify(st)
	}
	if pod != nil {
		w.path.Observe(w.now(), pod.Level, pod.Signals)
	}
}

// Attrs are s as log attributes, the pod's path so far included.
func (w *Watch) Attrs(s Summary) []slog.Attr {
	if s.Pod != nil {
		s.Pod.Path = w.path.Path()
	}
	return s.Attrs()
}

// Announce logs the pod's start and where to point curl: JSON log lines,
// and the same commands as plain text on banner (nil: none), where they
// paste as they are.
func Announce(ctx context.Context, log *slog.Logger, banner io.Writer, p Pod, speed float64, podURL, trafficURL, adminURL string) {
	log.LogAttrs(ctx, slog.LevelInfo, "demo pod started",
		slog.String("upstream", Upstream), slog.String("url", podURL), slog.String("pod", p.Name),
		slog.String("gpu", GPU), slog.String("model", Model),
		slog.Float64("gpu_memory_utilization", p.GPUMemoryUtilization), slog.Float64("speed", speed))
	chat, state, metrics := Curls(trafficURL, adminURL)
	log.LogAttrs(ctx, slog.LevelInfo, "demo ready",
		slog.String("listen", trafficURL), slog.String("admin_listen", adminURL),
		slog.String("chat_curl", chat), slog.String("state_curl", state), slog.String("metrics_curl", metrics))
	if banner != nil {
		fmt.Fprint(banner, Banner(trafficURL, adminURL))
	}
}
