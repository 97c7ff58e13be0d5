package queue

import (
	"cmp"
	"strings"
)

// tenantHeapKind selects a tenantHeap's order and its slot in tenant.idx.
type tenantHeapKind uint8

const (
	byCounter     tenantHeapKind = inBacklog // least counter, then the oldest waiter
	idleByCounter tenantHeapKind = inIdle    // least counter, then by key: which idle tenant to forget first
)

// tenantHeap is a binary min-heap of tenants with index tracking, as heap
// is of items.
type tenantHeap struct {
	kind  tenantHeapKind
	items []*tenant
}

func (h *tenantHeap) len() int { return len(h.items) }

func (h *tenantHeap) top() *tenant {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

func (h *tenantHeap) push(t *tenant) {
	t.idx[h.kind] = len(h.items)
	h.items = append(h.items, t)
	h.up(len(h.items) - 1)
}

// remove takes t out of the heap; it must be in it.
func (h *tenantHeap) remove(t *tenant) {
	i, n := t.idx[h.kind], len(h.items)-1
	if i != n {
		h.swap(i, n)
	}
	h.items[n] = nil
	h.items = h.items[:n]
	if i != n {
		h.fixAt(i)
	}
	t.idx[h.kind] = -1
}

// fix restores the order after t's key changed; t must be in the heap.
func (h *tenantHeap) fix(t *tenant) { h.fixAt(t.idx[h.kind]) }

func (h *tenantHeap) fixAt(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *tenantHeap) less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.counter != b.counter {
		return a.counter < b.counter
	}
	if h.kind == byCounter {
		return a.oldest() < b.oldest() // both have linked waiters
	}
	return cmp.Or(cmp.Compare(a.key.priority, b.key.priority), strings.Compare(a.key.name, b.key.name)) < 0
}

func (h *tenantHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].idx[h.kind] = i
	h.items[j].idx[h.kind] = j
}

func (h *tenantHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts tenant i down and reports whether it moved.
func (h *tenantHeap) down(i0 int) bool {
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
