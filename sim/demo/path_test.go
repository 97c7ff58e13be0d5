package demo

import (
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

func TestPathRecorder(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	sigs := func(frag, kv float64) map[pressure.Signal]pressure.Value {
		return map[pressure.Signal]pressure.Value{pressure.Fragmentation: {Value: frag}, pressure.KVCacheUsage: {Value: kv}}
	}
	// Each row is one pressure round; the time since the previous round
	// counts toward the previous round's level.
	steps := []struct {
		at      time.Duration
		level   string
		signals map[pressure.Signal]pressure.Value
		want    Path
	}{
		{at: 0, level: "normal", want: Path{}},
		{at: time.Second, level: "degraded", signals: sigs(1.025, 0.97),
			want: Path{PeakFragmentation: 1.025, HasFragmentation: true, PeakKVCacheUsage: 0.97, HasKVCacheUsage: true}},
		{at: 3 * time.Second, level: "critical", signals: sigs(1.6, 0.5),
			want: Path{PeakFragmentation: 1.6, HasFragmentation: true, PeakKVCacheUsage: 0.97, HasKVCacheUsage: true, Degraded: 2 * time.Second}},
		{at: 4 * time.Second, level: "normal", signals: map[pressure.Signal]pressure.Value{pressure.KVCacheUsage: {Value: 0.99}},
			want: Path{PeakFragmentation: 1.6, HasFragmentation: true, PeakKVCacheUsage: 0.99, HasKVCacheUsage: true, Degraded: 2 * time.Second, Critical: time.Second}},
		{at: 4 * time.Second, level: "degraded", // the same instant: no time passes
			want: Path{PeakFragmentation: 1.6, HasFragmentation: true, PeakKVCacheUsage: 0.99, HasKVCacheUsage: true, Degraded: 2 * time.Second, Critical: time.Second}},
		{at: 9 * time.Second, level: "normal",
			want: Path{PeakFragmentation: 1.6, HasFragmentation: true, PeakKVCacheUsage: 0.99, HasKVCacheUsage: true, Degraded: 7 * time.Second, Critical: time.Second}},
	}
	var r PathRecorder
	for i, st := range steps {
		r.Observe(t0.Add(st.at), st.level, st.signals)
		if got := r.Path(); got != st.want {
			t.Fatalf("round %d (%v, %s): Path() = %+v, want %+v", i, st.at, st.level, got, st.want)
		}
	}
}
