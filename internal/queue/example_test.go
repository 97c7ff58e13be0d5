package queue_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

func ExampleQueue() {
	q, err := queue.New(queue.Settings{MaxLength: 100})
	if err != nil {
		panic(err)
	}
	q.SetWindow("vllm-0", 2)
	q.SetWindow("vllm-1", 1)

	slot, err := q.Acquire(context.Background(), queue.Request{Tokens: 300})
	if err != nil {
		panic(err) // the proxy answers 503 queue_full / queue_timeout here
	}
	fmt.Println("sent to", slot.Upstream())
	for _, w := range q.Stats().Windows {
		fmt.Printf("%s %d/%d\n", w.Name, w.InFlight, w.Limit)
	}
	slot.Release() // when the response body is copied
	// Output:
	// sent to vllm-0
	// vllm-0 1/2
	// vllm-1 0/1
}

func ExampleCore() {
	c, err := queue.NewCore(queue.Settings{StarvationAfter: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a virtual clock
	c.SetWindow("vllm-0", 1)
	c.SetOrder(queue.ShortestFirst)

	g, granted, _ := c.Enqueue(now, queue.Request{ID: 1, Tokens: 500})
	fmt.Println(g.ID, granted, g.Upstream)
	c.Enqueue(now, queue.Request{ID: 2, Tokens: 4000})
	c.Enqueue(now.Add(time.Second), queue.Request{ID: 3, Tokens: 20})
	c.Enqueue(now.Add(time.Second), queue.Request{ID: 4, Tokens: 30})

	show := func(grants []queue.Grant) queue.Grant {
		for _, g := range grants {
			fmt.Println(g.ID, g.Upstream, g.Cost.Tokens)
		}
		return grants[0]
	}
	g = show(c.Release(now.Add(2*time.Second), "vllm-0", g.Cost))  // shortest first
	g = show(c.Release(now.Add(12*time.Second), "vllm-0", g.Cost)) // 2 has starved
	show(c.Release(now.Add(13*time.Second), "vllm-0", g.Cost))     // 4 has waited 12s
	// Output:
	// 1 true vllm-0
	// 3 vllm-0 20
	// 2 vllm-0 4000
	// 4 vllm-0 30
}
