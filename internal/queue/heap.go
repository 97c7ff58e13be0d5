package queue

import "time"

// item is one waiting request. It sits in four heaps at once (every
// waiter's, and its group's three); idx records its position in each so
// removal is O(log n) without searching.
type item struct {
	id       uint64
	priority int    // higher leaves first, whatever the order
	seq      uint64 // arrival order; unique
	tokens   int64
	memory   int64 // Request.Memory
	seqs     int   // Request.Seqs, at least 1
	arrival  time.Time
	deadline time.Time // Request.Deadline; zero: none
	exclude  []string
	prefix   []uint64 // Request.Prefix
	service  int64    // Request.Service, at least 0: charged to tenant when granted
	group    *group
	tenant   *tenant
	idx      [4]int // position in the heap of each kind; -1 when out
}

// heapKind selects a heap's order and its slot in item.idx.
type heapKind uint8

const (
	byArrival     heapKind = iota // every waiter: highest priority first, then oldest
	groupArrival                  // a group's waiters, in the same order
	groupSize                     // a group's waiters: highest priority, then fewest estimated tokens, then oldest
	groupDeadline                 // a group's waiters: highest priority, then earliest deadline (none last), then oldest
)

// heap is a binary min-heap of items with index tracking. The zero value of
// a given kind is an empty heap.
type heap struct {
	kind  heapKind
	items []*item
}

func (h *heap) len() int { return len(h.items) }

// top returns the first item, or nil when the heap is empty.
func (h *heap) top() *item {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

func (h *heap) push(it *item) {
	it.idx[h.kind] = len(h.items)
	h.items = append(h.items, it)
	h.up(len(h.items) - 1)
}

// remove takes it out of the heap; it must be in it.
func (h *heap) remove(it *item) {
	i, n := it.idx[h.kind], len(h.items)-1
	if i != n {
		h.swap(i, n)
	}
	h.items[n] = nil // let the item be collected
	h.items = h.items[:n]
	if i != n && !h.down(i) {
		h.up(i)
	}
	it.idx[h.kind] = -1
}

// reset empties the heap and frees its backing array.
func (h *heap) reset() { h.items = nil }

func (h *heap) less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if h.kind == groupSize && a.tokens != b.tokens {
		return a.tokens < b.tokens
	}
	if h.kind == groupDeadline && !a.deadline.Equal(b.deadline) {
		return earlier(a.deadline, b.deadline)
	}
	return a.seq < b.seq
}

func (h *heap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].idx[h.kind] = i
	h.items[j].idx[h.kind] = j
}

func (h *heap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts item i down and reports whether it moved.
func (h *heap) down(i0 int) bool {
	i, n := i0, len(h.items)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h.less(r, j) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// earlier reports whether deadline a comes before b; a zero deadline (none)
// comes after every other.
func earlier(a, b time.Time) bool {
	switch {
	case a.IsZero():
		return false
	case b.IsZero():
		return true
	}
	return a.Before(b)
}
