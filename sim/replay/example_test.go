package replay_test

import (
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

func ExampleRun() {
	gpu, _ := sim.GPUByName("H100-80G")
	r, err := replay.Run(replay.Settings{
		Engine: sim.Settings{GPU: gpu},
		Trace:  replay.TraceSettings{Duration: time.Minute, Seed: 1},
		Policy: replay.Gatekeeper,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Policy, r.Arrivals, r.OOMs)
	// Output:
	// gatekeeper 2973 0
}
