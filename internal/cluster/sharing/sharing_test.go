package sharing

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
)

type nopQueue struct{}

func (nopQueue) SetWindow(string, int)         {}
func (nopQueue) SetMemoryBudget(string, int64) {}
func (nopQueue) SetTokenLimit(string, int64)   {}
func (nopQueue) RemoveWindow(string)           {}

// TestReadyAndGauges: a replica holding no share is not ready (unless in
// observe mode); the share gauge follows the declared pods.
func TestReadyAndGauges(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	var steps []string
	sh, err := New(Settings{Cluster: cluster.Settings{URL: "redis://127.0.0.1:1/0"}, Windows: cluster.NewWindows(cluster.WindowsSettings{Queue: nopQueue{}}),
		Registerer: reg, Step: func(s string) { steps = append(steps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Cluster().Close() })
	if err := sh.Ready(false); err != nil {
		t.Errorf("Ready() declaring no pod = %v, want nil", err)
	}
	sh.Cluster().SetPods(map[string]int{"a": 10})
	if err := sh.Ready(false); err == nil {
		t.Error("Ready() holding no share = nil, want an error")
	}
	if err := sh.Ready(true); err != nil {
		t.Errorf("Ready(observe) = %v, want nil", err)
	}
	if n := testutil.CollectAndCount(reg, "gatekeeper_cluster_window_share"); n != 1 {
		t.Errorf("share series = %d, want one for a", n)
	}
	sh.changed(false)
	if len(steps) != 1 || steps[0] != "cluster_down" || testutil.ToFloat64(sh.up) != 0 {
		t.Errorf("after changed(false): steps %v, up %v; want cluster_down and 0", steps, testutil.ToFloat64(sh.up))
	}
}
