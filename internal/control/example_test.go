package control_test

import (
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

func ExampleController() {
	policy, err := config.Parse([]byte(`upstreams: [{name: vllm-0, url: "http://127.0.0.1:8000", max_inflight: 100}]`))
	if err != nil {
		panic(err)
	}
	ctl, err := control.New(control.FromPolicy(policy))
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// One round per pressure poll (here every second): the monitor's State
	// in, decisions out. The default fragmentation rule acts on a ratio held
	// for 2 s, not on one reading.
	for _, frag := range []float64{1.0, 1.3, 1.3, 1.6, 1.6, 1.6} {
		st := pressure.State{Upstreams: []pressure.UpstreamState{{Name: "vllm-0", Signals: map[pressure.Signal]pressure.Value{
			pressure.Fragmentation: {Value: frag, Source: "vllm-0/memory_blocks"}}}}}
		d := ctl.ObserveAt(now, st, true)
		c := d.Upstreams[0]
		fmt.Printf("ratio %.1f: %s, window %d, queue %s, takes new work %v", frag, c.Level, c.Limit, d.Order, !ctl.Critical("vllm-0"))
		if c.LevelChanged {
			fmt.Printf(", hook %q (cause %s=%.1f from %s)", c.Hook, c.Cause.Signal, c.Cause.Value, c.Cause.Source)
		}
		fmt.Println()
		now = now.Add(time.Second)
	}
	// Output:
	// ratio 1.0: normal, window 100, queue fifo, takes new work true
	// ratio 1.3: normal, window 100, queue fifo, takes new work true
	// ratio 1.3: normal, window 100, queue fifo, takes new work true
	// ratio 1.6: degraded, window 80, queue shortest_first, takes new work true, hook "degraded" (cause fragmentation=1.6 from vllm-0/memory_blocks)
	// ratio 1.6: degraded, window 80, queue shortest_first, takes new work true
	// ratio 1.6: critical, window 64, queue shortest_first, takes new work false, hook "critical" (cause fragmentation=1.6 from vllm-0/memory_blocks)
}
