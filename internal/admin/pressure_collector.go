package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// pressureCollector exports pressure.State at scrape time: the classic
// fragmentation per GPU, every signal per upstream and GPU with its age,
// the per-GPU derived signals (the fragmentation ratio as the policy reads
// it, and the rates DESIGN §7 names), and each source's health. Values the
// monitor keeps after their source went stale are still exported; their
// age and gatekeeper_source_stale say so.
//
// A signal's value goes to the family of its unit (signalFamily), so that
// each metric name carries one unit, as Prometheus' naming rules ask: the
// dimensionless signals under gatekeeper_pressure_signal, the per-second
// rates under gatekeeper_pressure_signal_per_second, the bytes under
// gatekeeper_pressure_signal_bytes (issue 35, item 13).
type pressureCollector struct {
	snapshot func() pressure.State

	fragmentation, ratio, age, growth, effective, allocRetries *prometheus.Desc
	signal, signalPerSecond, signalBytes                       *prometheus.Desc
	up, lastSuccess, stale, neverAnswered                      *prometheus.Desc
}

// NewPressureCollector returns a collector that calls snapshot at every
// scrape (pass (*pressure.Monitor).Snapshot, or a func that follows the
// current monitor across reloads). Every family is described even while
// snapshot yields nothing.
func NewPressureCollector(snapshot func() pressure.State) prometheus.Collector {
	ug := []string{"upstream", "gpu_id"}
	ugs := []string{"upstream", "gpu_id", "signal"}
	src := []string{"source"}
	return &pressureCollector{snapshot: snapshot,
		fragmentation: prometheus.NewDesc("vllm_gpu_memory_fragmentation",
			"Largest free block ÷ total free memory of the GPU's allocator (≤ 1; 1 = one free block): the inverse of gatekeeper_fragmentation_ratio, which the policy's thresholds act on.", []string{"gpu_id"}, nil),
		ratio: prometheus.NewDesc("gatekeeper_fragmentation_ratio",
			"Total free memory ÷ largest free block of the GPU's allocator (≥ 1; 1 = one free block): the fragmentation signal as the policy's thresholds read it, the inverse of vllm_gpu_memory_fragmentation.", ug, nil),
		signal: prometheus.NewDesc("gatekeeper_pressure_signal",
			"Latest value of each dimensionless pressure signal (a ratio, a fraction or a count of requests); gpu_id is empty for upstream-level signals. Rates are in gatekeeper_pressure_signal_per_second, bytes in gatekeeper_pressure_signal_bytes.", ugs, nil),
		signalPerSecond: prometheus.NewDesc("gatekeeper_pressure_signal_per_second",
			"Latest value of each pressure signal that is a rate per second, smoothed; gpu_id is empty for upstream-level signals.", ugs, nil),
		signalBytes: prometheus.NewDesc("gatekeeper_pressure_signal_bytes",
			"Latest value of each pressure signal counted in bytes; gpu_id is empty for upstream-level signals.", ugs, nil),
		age: prometheus.NewDesc("gatekeeper_pressure_signal_age_seconds",
			"Age of the reading behind each signal's value (in gatekeeper_pressure_signal, _per_second or _bytes, by the signal's unit).", ugs, nil),
		growth: prometheus.NewDesc("gatekeeper_fragmentation_growth_rate",
			"Change of the fragmentation ratio (total free ÷ largest free block) per second, smoothed.", ug, nil),
		effective: prometheus.NewDesc("gatekeeper_effective_utilization",
			"Allocated ÷ reserved bytes of the GPU's caching allocator.", ug, nil),
		allocRetries: prometheus.NewDesc("gatekeeper_alloc_retry_rate",
			"Allocation retries after a cache flush, per second, smoothed (the alloc_retry_rate signal).", ug, nil),
		up: prometheus.NewDesc("gatekeeper_source_up",
			"1 when the pressure source's latest read succeeded.", src, nil),
		lastSuccess: prometheus.NewDesc("gatekeeper_source_last_success_timestamp_seconds",
			"Unix time of the pressure source's latest good reading.", src, nil),
		stale: prometheus.NewDesc("gatekeeper_source_stale",
			"1 when the pressure source has had no good reading within stale_after.", src, nil),
		neverAnswered: prometheus.NewDesc("gatekeeper_source_never_answered",
			"1 when the pressure source has been read but has never answered: a configuration problem; its signals count toward no level.", src, nil),
	}
}

func (c *pressureCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.fragmentation, c.ratio, c.signal, c.signalPerSecond, c.signalBytes,
		c.age, c.growth, c.effective, c.allocRetries, c.up, c.lastSuccess, c.stale, c.neverAnswered} {
		ch <- d
	}
}

func (c *pressureCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, src := range s.Sources {
		gauge(c.up, boolValue(src.Up), src.Name)
		gauge(c.stale, boolValue(src.Stale), src.Name)
		gauge(c.neverAnswered, boolValue(src.NeverAnswered), src.Name)
		if !src.LastSuccess.IsZero() {
			gauge(c.lastSuccess, float64(src.LastSuccess.UnixNano())/1e9, src.Name)
		}
	}
	signal := func(sig pressure.Signal, v pressure.Value, upstream, gpu string) {
		if d := c.signalFamily(sig); d != nil {
			gauge(d, v.Value, upstream, gpu, string(sig))
			gauge(c.age, v.Age.Seconds(), upstream, gpu, string(sig))
		}
	}
	// A GPU may appear under several upstreams (or several pods may number
	// their GPUs from 0): one series per gpu_id, the fresh worst.
	classic := map[string]pressure.Value{}
	for _, u := range s.Upstreams {
		for sig, v := range u.Signals {
			if v.GPU == "" {
				signal(sig, v, u.Name, "")
			}
		}
		for _, g := range u.GPUs {
			if g.ID == "" {
				continue // cannot be told from the upstream-level series
			}
			for sig, v := range g.Signals {
				signal(sig, v, u.Name, g.ID)
			}
			for sig, d := range map[pressure.Signal]*prometheus.Desc{pressure.Fragmentation: c.ratio, pressure.FragmentationGrowth: c.growth,
				pressure.EffectiveUtilization: c.effective, pressure.AllocRetryRate: c.allocRetries} {
				if v, ok := g.Signals[sig]; ok {
					gauge(d, v.Value, u.Name, g.ID)
				}
			}
			if v, ok := g.ClassicFragmentation(); ok {
				if cur, seen := classic[g.ID]; !seen || (cur.Stale && !v.Stale) || (cur.Stale == v.Stale && v.Value < cur.Value) {
					classic[g.ID] = v
				}
			}
		}
	}
	for id, v := range classic {
		gauge(c.fragmentation, v.Value, id)
	}
}

// signalFamily is the family that exports sig's value: the one of its unit
// (pressure.SignalInfo.Unit). Nil for a unit this collector does not know,
// whose values it leaves out rather than put under another unit's name;
// TestPressureCollectorUnits proves every signal has a family.
func (c *pressureCollector) signalFamily(sig pressure.Signal) *prometheus.Desc {
	switch sig.Info().Unit {
	case pressure.UnitRatio, pressure.UnitFraction, pressure.UnitRequests:
		return c.signal
	case pressure.UnitPerSecond:
		return c.signalPerSecond
	case pressure.UnitBytes:
		return c.signalBytes
	}
	return nil
}
