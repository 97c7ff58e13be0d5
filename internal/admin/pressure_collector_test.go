package admin

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// signalSeries matches a series of the signal value families in the text
// format.
var signalSeries = regexp.MustCompile(`(?m)^gatekeeper_pressure_signal(?:_per_second|_bytes)?\{`)

func TestPressureCollector(t *testing.T) {
	t.Parallel()
	at := time.Unix(1767225600, 0)
	val := func(v float64, src, gpu string, age time.Duration, stale bool) pressure.Value {
		return pressure.Value{Value: v, Source: src, GPU: gpu, At: at, Age: age, Stale: stale}
	}
	gpu0 := map[pressure.Signal]pressure.Value{
		pressure.Fragmentation:        val(1.25, "a/alloc", "0", time.Second, false),
		pressure.FragmentationGrowth:  val(0.01, "a/alloc", "0", time.Second, false),
		pressure.EffectiveUtilization: val(0.8, "a/alloc", "0", time.Second, false),
		pressure.AllocRetryRate:       val(0.5, "a/alloc", "0", time.Second, false),
		pressure.FreeMemory:           val(16<<30, "a/alloc", "0", time.Second, false),
	}
	tests := []struct {
		name  string
		state pressure.State
		names []string
		want  string
	}{
		{name: "empty state still describes every family", names: []string{"vllm_gpu_memory_fragmentation"}},
		{
			name: "signals, rates, sources; one classic series per gpu_id",
			state: pressure.State{
				Upstreams: []pressure.UpstreamState{
					{Name: "a",
						Signals: map[pressure.Signal]pressure.Value{pressure.KVCacheUsage: val(0.5, "a/vllm", "", 2*time.Second, false)},
						GPUs:    []pressure.GPUState{{ID: "0", Signals: gpu0}}},
					{Name: "b", GPUs: []pressure.GPUState{{ID: "0", Signals: map[pressure.Signal]pressure.Value{
						pressure.Fragmentation: val(2, "b/alloc", "0", 3*time.Second, true), // stale: a's fresh value wins
					}}}},
				},
				Sources: []pressure.SourceState{
					{Name: "a/vllm", Up: true, LastSuccess: at},
					{Name: "b/alloc", Up: false, Stale: true, LastError: "refused", LastSuccess: at},
					{Name: "nvml", LastError: "NVML Shared Library Not Found", Stale: true},
				},
			},
			names: []string{"vllm_gpu_memory_fragmentation", "gatekeeper_pressure_signal",
				"gatekeeper_pressure_signal_per_second", "gatekeeper_pressure_signal_bytes",
				"gatekeeper_fragmentation_ratio", "gatekeeper_fragmentation_growth_rate", "gatekeeper_effective_utilization",
				"gatekeeper_alloc_retry_rate", "gatekeeper_source_up",
				"gatekeeper_source_last_success_timestamp_seconds", "gatekeeper_source_stale"},
			want: `
# HELP gatekeeper_alloc_retry_rate Allocation retries after a cache flush, per second, smoothed (the alloc_retry_rate signal).
# TYPE gatekeeper_alloc_retry_rate gauge
gatekeeper_alloc_retry_rate{gpu_id="0",upstream="a"} 0.5
# HELP gatekeeper_effective_utilization Allocated ÷ reserved bytes of the GPU's caching allocator.
# TYPE gatekeeper_effective_utilization gauge
gatekeeper_effective_utilization{gpu_id="0",upstream="a"} 0.8
# HELP gatekeeper_fragmentation_growth_rate Change of the fragmentation ratio (total free ÷ largest free block) per second, smoothed.
# TYPE gatekeeper_fragmentation_growth_rate gauge
gatekeeper_fragmentation_growth_rate{gpu_id="0",upstream="a"} 0.01
# HELP gatekeeper_fragmentation_ratio Total free memory ÷ largest free block of the GPU's allocator (≥ 1; 1 = one free block): the fragmentation signal as the policy's thresholds read it, the inverse of vllm_gpu_memory_fragmentation.
# TYPE gatekeeper_fragmentation_ratio gauge
gatekeeper_fragmentation_ratio{gpu_id="0",upstream="a"} 1.25
gatekeeper_fragmentation_ratio{gpu_id="0",upstream="b"} 2
# HELP gatekeeper_pressure_signal Latest value of each dimensionless pressure signal (a ratio, a fraction or a count of requests); gpu_id is empty for upstream-level signals. Rates are in gatekeeper_pressure_signal_per_second, bytes in gatekeeper_pressure_signal_bytes.
# TYPE gatekeeper_pressure_signal gauge
gatekeeper_pressure_signal{gpu_id="",signal="kv_cache_usage",upstream="a"} 0.5
gatekeeper_pressure_signal{gpu_id="0",signal="effective_utilization",upstream="a"} 0.8
gatekeeper_pressure_signal{gpu_id="0",signal="fragmentation",upstream="a"} 1.25
gatekeeper_pressure_signal{gpu_id="0",signal="fragmentation",upstream="b"} 2
# HELP gatekeeper_pressure_signal_bytes Latest value of each pressure signal counted in bytes; gpu_id is empty for upstream-level signals.
# TYPE gatekeeper_pressure_signal_bytes gauge
gatekeeper_pressure_signal_bytes{gpu_id="0",signal="free_memory_bytes",upstream="a"} 1.7179869184e+10
# HELP gatekeeper_pressure_signal_per_second Latest value of each pressure signal that is a rate per second, smoothed; gpu_id is empty for upstream-level signals.
# TYPE gatekeeper_pressure_signal_per_second gauge
gatekeeper_pressure_signal_per_second{gpu_id="0",signal="alloc_retry_rate",upstream="a"} 0.5
gatekeeper_pressure_signal_per_second{gpu_id="0",signal="fragmentation_growth",upstream="a"} 0.01
# HELP gatekeeper_source_last_success_timestamp_seconds Unix time of the pressure source's latest good reading.
# TYPE gatekeeper_source_last_success_timestamp_seconds gauge
gatekeeper_source_last_success_timestamp_seconds{source="a/vllm"} 1.7672256e+09
gatekeeper_source_last_success_timestamp_seconds{source="b/alloc"} 1.7672256e+09
# HELP gatekeeper_source_stale 1 when the pressure source has had no good reading within stale_after.
# TYPE gatekeeper_source_stale gauge
gatekeeper_source_stale{source="a/vllm"} 0
gatekeeper_source_stale{source="b/alloc"} 1
gatekeeper_source_stale{source="nvml"} 1
# HELP gatekeeper_source_up 1 when the pressure source's latest read succeeded.
# TYPE gatekeeper_source_up gauge
gatekeeper_source_up{source="a/vllm"} 1
gatekeeper_source_up{source="b/alloc"} 0
gatekeeper_source_up{source="nvml"} 0
# HELP vllm_gpu_memory_fragmentation Largest free block ÷ total free memory of the GPU's allocator (≤ 1; 1 = one free block): the inverse of gatekeeper_fragmentation_ratio, which the policy's thresholds act on.
# TYPE vllm_gpu_memory_fragmentation gauge
vllm_gpu_memory_fragmentation{gpu_id="0"} 0.8
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := NewPressureCollector(func() pressure.State { return tt.state })
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(c); err != nil {
				t.Fatalf("Register() = %v", err)
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tt.want), tt.names...); err != nil {
				t.Error(err)
			}
			if n, err := testutil.GatherAndCount(reg, "gatekeeper_pressure_signal_age_seconds"); err != nil || n != len(signalSeries.FindAllString(tt.want, -1)) {
				t.Errorf("age series = %d, %v, want one per signal series", n, err)
			}
			descs := make(chan *prometheus.Desc, 20)
			c.Describe(descs)
			close(descs)
			var all []string
			for d := range descs {
				all = append(all, d.String())
			}
			if !strings.Contains(strings.Join(all, " "), `fqName: "vllm_gpu_memory_fragmentation"`) {
				t.Errorf("Describe() = %v, want vllm_gpu_memory_fragmentation", all)
			}
		})
	}
}

// TestPressureCollectorUnits exports every signal, per GPU or per upstream
// as it is read, and checks that each metric name carries one unit, the one
// its suffix names (Prometheus' naming rules): a signal's unit
// (pressure.SignalInfo.Unit) decides its family, and no signal is left out.
// gatekeeper_pressure_signal once mixed bytes (free_memory_bytes) and
// per-second rates with ratios (issue 35, item 13).
func TestPressureCollectorUnits(t *testing.T) {
	t.Parallel()
	// What each unit is by Prometheus' rules: the suffix a name must end
	// with ("" for the dimensionless: ratios, fractions, counts).
	suffixOf := map[string]string{
		pressure.UnitRatio: "", pressure.UnitFraction: "", pressure.UnitRequests: "",
		pressure.UnitPerSecond: "_per_second", pressure.UnitBytes: "_bytes",
	}
	up := pressure.UpstreamState{Name: "a", Signals: map[pressure.Signal]pressure.Value{}}
	gpu := pressure.GPUState{ID: "0", Signals: map[pressure.Signal]pressure.Value{}}
	for i, sig := range pressure.Signals() {
		if sig.Info().PerGPU {
			gpu.Signals[sig] = pressure.Value{Value: float64(i + 1), GPU: "0"}
		} else {
			up.Signals[sig] = pressure.Value{Value: float64(i + 1)}
		}
	}
	up.GPUs = []pressure.GPUState{gpu}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewPressureCollector(func() pressure.State { return pressure.State{Upstreams: []pressure.UpstreamState{up}} }))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	families := map[pressure.Signal][]string{} // signal → the value families it is in
	for _, mf := range mfs {
		name := mf.GetName()
		if strings.HasSuffix(name, "_age_seconds") {
			continue // every signal's age, in seconds
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "signal" {
					continue
				}
				sig := pressure.Signal(l.GetValue())
				families[sig] = append(families[sig], name)
				unit := sig.Info().Unit
				suffix, known := suffixOf[unit]
				switch {
				case !known:
					t.Errorf("%s: unit %q has no Prometheus suffix in this test", sig, unit)
				case suffix == "" && (strings.HasSuffix(name, "_bytes") || strings.HasSuffix(name, "_seconds") || strings.HasSuffix(name, "_per_second")):
					t.Errorf("%s{signal=%q}: a dimensionless signal (%s) under a name with a unit", name, sig, unit)
				case !strings.HasSuffix(name, suffix):
					t.Errorf("%s{signal=%q}: a signal in %s under a name without %q", name, sig, unit, suffix)
				}
			}
		}
	}
	for _, sig := range pressure.Signals() {
		if got := families[sig]; len(got) != 1 {
			t.Errorf("signal %s is exported in %v, want exactly one family", sig, got)
		}
	}
}
