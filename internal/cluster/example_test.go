package cluster_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
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
// decides alone at this replica's share: of a burst of 4 over 2 replicas, 2.
func ExampleGate() {
	c, err := cluster.New(cluster.Settings{URL: "redis://127.0.0.1:6379/0", Replicas: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	g, err := c.NewGate(cluster.GateSettings{Limits: breaker.LimiterSettings{QPS: 1, Burst: 4}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		fmt.Println(g.Allow(context.Background(), "client") == nil)
	}
	// Output:
	// true
	// true
	// false
}

// A replica runs its part of each pod's window: what its lease holds, in
// slots of the pod's largest window, scaled onto the window and budgets the
// slow breaker sets now. A pod is declared with its largest window; before
// any renewal answers the replica holds nothing of it.
func ExampleCluster_Scale() {
	c, err := cluster.New(cluster.Settings{URL: "redis://127.0.0.1:6379/0", Replicas: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	c.SetPods(map[string]int{"vllm-0": 256})
	window, budget, tokens := c.Scale("vllm-0", 256, 1<<30, 0)
	fmt.Println(window, budget, tokens)
	// Output: 0 1 0
}

// Until a heartbeat reaches Redis (and whenever Redis is lost), Quotas
// decides with the local quota.Quotas at this replica's share: of 1000
// tokens a minute over 2 replicas, 500.
func ExampleQuotas() {
	c, err := cluster.New(cluster.Settings{URL: "redis://127.0.0.1:6379/0", Replicas: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	local, err := quota.New(quota.Settings{})
	if err != nil {
		fmt.Println(err)
		return
	}
	q := c.NewQuotas(local)
	if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"llama": {PerMinute: 1000}}}); err != nil {
		fmt.Println(err)
		return
	}
	_, err = q.Charge(context.Background(), quota.Ask{Model: "llama", Estimate: 400})
	fmt.Println(err)
	_, err = q.Charge(context.Background(), quota.Ask{Model: "llama", Estimate: 400})
	fmt.Println(errors.Is(err, quota.ErrExceeded), local.Snapshot().Models["llama"].Minute)
	// Output:
	// <nil>
	// true {400 500}
}
