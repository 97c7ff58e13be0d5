package cluster_test

import (
	"fmt"

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
