package slowpath

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"log/slog"

	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// policy's fragmentation rule has no for, so one round moves a level.
const policy = `
upstreams:
  - {name: pod, url: "http://pod.invalid:8000", max_inflight: 10, min_inflight: 2}
pressure: {hold: 5s, hysteresis: 0.05, rules: {fragmentation: {degrade: 1.2, shed: 1.5}}}
batch: {cut: 0.2, cut_every: 2s, ramp_step: 0.5, ramp_every: 1s}
`

type decided struct {
	mu  sync.Mutex
	got []string
}

func (d *decided) add(decision string, enforced bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, decision)
}

// TestObserveCutsLogsAndCounts: one round at degraded fragmentation cuts
// the window through Windows, counts the resize decision and the level
// transition, and logs the change once.
func TestObserveCutsLogsAndCounts(t *testing.T) {
	cfg, err := config.Parse([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := control.New(control.FromPolicy(cfg))
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(queue.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	w := cluster.NewWindows(cluster.WindowsSettings{Queue: q})
	w.SetWindow("pod", 10)
	var logs bytes.Buffer
	var d decided
	reg := prometheus.NewRegistry()
	p, err := New(Settings{Controller: ctl, Queue: q, Windows: w, Config: func() *config.Config { return cfg },
		Decided: d.add, Log: slog.New(slog.NewJSONHandler(&logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	p.Observe(pressure.State{Upstreams: []pressure.UpstreamState{{Name: "pod",
		Signals: map[pressure.Signal]pressure.Value{pressure.Fragmentation: {Value: 1.3}}}}})
	if got := q.Stats().Windows[0].Limit; got != 8 {
		t.Errorf("window after a degraded round = %d, want 8 (10 cut by 20%%)", got)
	}
	if len(d.got) != 1 || d.got[0] != DecisionWindowResize {
		t.Errorf("decisions = %v, want one %s", d.got, DecisionWindowResize)
	}
	if n := testutil.CollectAndCount(reg, "gatekeeper_level_transitions_total"); n != 1 {
		t.Errorf("level transition series = %d, want 1", n)
	}
	if n := testutil.CollectAndCount(reg, "gatekeeper_hook_calls_total"); n != 15 {
		t.Errorf("hook call series = %d, want 15 from the start", n)
	}
	if c := strings.Count(logs.String(), `"msg":"pressure level changed"`); c != 1 || !strings.Contains(logs.String(), `"state":"degraded"`) {
		t.Errorf("logs = %s, want one level change to degraded", logs.String())
	}
}
