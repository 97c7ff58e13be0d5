package replay

// expiryHeap holds the waiters by when they stop waiting (request.expires),
// soonest first: each waits until its own deadline or max_wait, whichever
// comes first, so arrival order is not expiry order. It implements
// container/heap's Interface.
type expiryHeap []*request

func (h expiryHeap) Len() int { return len(h) }

func (h expiryHeap) Less(i, j int) bool {
	if h[i].expires != h[j].expires {
		return h[i].expires < h[j].expires
	}
	return h[i].id < h[j].id // the same instant: the earlier arrival first
}

func (h expiryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

func (h *expiryHeap) Push(x any) { *h = append(*h, x.(*request)) }

func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old) - 1
	x := old[n]
	old[n] = nil
	*h = old[:n]
	return x
}
