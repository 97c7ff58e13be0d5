package traffic_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// Arrivals at 2/s for 30 s, then 8/s for 15 s, each drawing a request from
// a mix of short chats and long documents. The same seed gives the same
// requests; one generator serves both, times first.
func ExampleArrivals() {
	rng := rand.New(rand.NewPCG(1, 2))
	p := traffic.Pattern{BaseQPS: 2, BurstQPS: 8, Steady: 30 * time.Second, Burst: 15 * time.Second}
	mix := traffic.Mix{
		{Name: "short", Weight: 0.8, Prompt: traffic.Range{Min: 50, Max: 200}, Output: traffic.Range{Min: 16, Max: 128}, MaxTokens: 128, Stream: true},
		{Name: "long", Weight: 0.2, Prompt: traffic.Range{Min: 2000, Max: 4000}, Output: traffic.Range{Min: 128, Max: 512}, MaxTokens: 512},
	}
	arr := traffic.NewArrivals(p, rng)
	for range 5 {
		at := arr.Next()
		c := mix[mix.Pick(rng)]
		fmt.Printf("%v %s prompt %d output %d\n", at.Round(time.Millisecond), c.Name, c.Prompt.Draw(rng), c.Output.Draw(rng))
	}
	// Output:
	// 1.481s short prompt 193 output 94
	// 1.491s short prompt 177 output 59
	// 2.164s short prompt 94 output 31
	// 4.357s long prompt 2791 output 447
	// 5.03s short prompt 112 output 70
}
