package sim_test

import (
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

func ExampleEngine() {
	e, err := sim.New(sim.Settings{}) // Llama-3-8B bf16 on an A100-80G
	if err != nil {
		panic(err)
	}
	s, _ := e.Submit(sim.Request{PromptTokens: 512, MaxTokens: 64})
	e.Advance(10 * time.Second)
	m := e.Metrics()
	fmt.Println(s.State(), s.Generated(), m.Counters.PromptTokens, m.Counters.GenerationTokens)
	fmt.Println("KV blocks:", e.Plan().NumGPUBlocks)
	// Output:
	// finished 64 512 64
	// KV blocks: 28547
}

func ExampleAllocator() {
	a, _ := sim.NewAllocator(sim.AllocSettings{DeviceBytes: 1 << 30})
	x, _ := a.Alloc(3 << 20) // a 20 MiB segment, split: 17 MiB stay cached
	s := a.Stats()
	fmt.Println(x.Size()>>20, s.ReservedBytes>>20, s.InactiveSplitBytes>>20)
	_ = a.Free(x)
	fmt.Println(a.EmptyCache() >> 20)
	// Output:
	// 3 20 17
	// 20
}
