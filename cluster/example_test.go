package cluster_test

import (
	"context"
	"fmt"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/cluster"
)

// A replica starts in local mode and knows only the replica count it was
// told; its share of a limit of 30 is 10 until a heartbeat (Run, Beat)
// reaches Redis and learns the real count.
func ExampleCluster() {
	c, err := cluster.New(cluster.Settings{
		URL:      "redis://127.0.0.1:6379/0",
		Replicas: 3,
		OnChange: func(up bool) { fmt.Println("shared mode:", up) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fmt.Println(c.Up(), c.Share(30))
	// Output: false 10
}

// Until a heartbeat reaches Redis (and whenever Redis is lost), a Gate
// decides alone at this replica's share: of a burst of 4 over 2 replicas,
// 2; of a window of 4, 2 slots.
func ExampleGate() {
	c, err := cluster.New(cluster.Settings{URL: "redis://127.0.0.1:6379/0", Replicas: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	g, err := c.NewGate(cluster.GateSettings{
		Limits: breaker.LimiterSettings{QPS: 1, Burst: 4},
		Window: func(pod string) int { return 4 },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		fmt.Println(g.Allow("client") == nil)
	}
	for range 3 {
		release, ok := g.Acquire(context.Background(), "pod-a", 1)
		fmt.Println(ok)
		if ok {
			defer release()
		}
	}
	// Output:
	// true
	// true
	// false
	// true
	// true
	// false
}
