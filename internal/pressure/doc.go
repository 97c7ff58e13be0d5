// Package pressure reads how full the GPUs behind each upstream are.
//
// It polls sources — NVML on the node, a vLLM pod's Prometheus /metrics, the
// DCGM exporter and an allocator's memory_blocks endpoint — each on its own
// goroutine, and turns their readings into signals per GPU and per upstream
// (DESIGN §3): fragmentation, kv_cache_usage, memory_used, preemption_rate,
// waiting, running, alloc_retry_rate, fragmentation_growth,
// effective_utilization and free_memory_bytes (Signals; Info says each one's
// unit and sources, and docs/signals.md is generated from it). A signal no
// source yields is absent, never zero.
//
// Create a Monitor with New, run its polling loop with Run, and read the
// latest State with Snapshot, which never waits on I/O. pressure says how
// full; deciding what to refuse belongs to package breaker.
//
// A Runner owns the running Monitor for a process whose policy reloads: it
// builds a new Monitor when the settings change (Prepare, which may fail)
// and swaps it in (Replace, which cannot), stopping the old one. It owns
// the context they run under, handed to it once by Start.
//
// OnUpdate comes once per round: after every source has reported since the
// last one (so a controller acting on it runs once per Interval, not once
// per source), or at once after Notify.
//
// Sources sit behind the Source interface so tests (and callers) can feed a
// Monitor with fakes through SourceSettings.Source. go-nvml sits behind the
// NVML interface, a subset of nvml.Interface that go-nvml's own
// pkg/nvml/mock satisfies.
//
// go-nvml needs cgo, so it is compiled in only with the nvml build tag
// (go build -tags nvml; NVMLCompiled says which build this is). The default
// build needs no cgo and can be a static binary; its nvml source fails every
// read with ErrNVMLNotCompiled, and the DCGM exporter and the allocator
// exporter (kinds dcgm and memory_blocks) carry the same facts.
package pressure
