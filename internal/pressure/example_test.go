package pressure_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// staticSource always reads the same values.
type staticSource struct{}

func (staticSource) Name() string { return "vllm-0/vllm" }

func (staticSource) Read(context.Context) (pressure.Reading, error) {
	return pressure.Reading{Values: map[pressure.Signal]float64{
		pressure.KVCacheUsage: 0.8125, pressure.Waiting: 3,
	}}, nil
}

func ExampleMonitor() {
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	m, err := pressure.New(pressure.Settings{
		Upstreams: []pressure.UpstreamSettings{{
			Name:    "vllm-0",
			Sources: []pressure.SourceSettings{{Kind: pressure.KindVLLM, Source: staticSource{}}},
		}},
		OnUpdate: func(s pressure.State) {
			once.Do(func() {
				u, _ := s.Upstream("vllm-0")
				v := u.Signals[pressure.KVCacheUsage]
				fmt.Printf("kv_cache_usage %.4f from %s, stale %v\n", v.Value, v.Source, v.Stale)
				fmt.Println("absent:", u.Absent)
				cancel() // one report is enough here; a server runs until shutdown
			})
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := m.Run(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// kv_cache_usage 0.8125 from vllm-0/vllm, stale false
	// absent: [fragmentation memory_used preemption_rate running alloc_retry_rate fragmentation_growth effective_utilization free_memory_bytes]
}
