package sim

// expSeg is the one expandable segment of a pool (PYTORCH_CUDA_ALLOC_CONF
// expandable_segments:True): a virtual address range whose mapped part grows
// at its end in pages, so a request that no cached block fits extends the
// free tail instead of taking a new, separate segment.
type expSeg struct {
	base   int64  // virtual address of the range
	page   int64  // mapping granularity: 2 MiB (small pool), 20 MiB (large pool)
	mapped int64  // bytes mapped from base on
	last   *block // the block at the end of the mapped part, nil when nothing is mapped
}

func (a *Allocator) expOf(small bool) *expSeg {
	if small {
		return &a.expSmall
	}
	return &a.expLarge
}

// grow maps enough pages at the end of the pool's expandable segment for a
// block of size bytes, merging them into a free tail, and returns that block
// out of the pool (like newSegment), or nil when the device has too little.
func (a *Allocator) grow(p *pool, size int64, small bool) *block {
	e := a.expOf(small)
	if e.page == 0 {
		e.page = largeBuffer
		if small {
			e.page = smallBuffer
		}
		e.base = a.nextAddr
		a.nextAddr += 1 << 40 // reserve a virtual range no device can fill
	}
	t := e.last
	var tailFree int64
	if t != nil && !t.allocated {
		tailFree = t.size
	}
	add := max(size-tailFree+e.page-1, 0) / e.page * e.page
	if a.reserved+add > a.s.DeviceBytes {
		return nil
	}
	a.reserved += add
	a.peakReserve = max(a.peakReserve, a.reserved)
	e.mapped += add
	if tailFree > 0 {
		a.takeFree(p, t)
		t.size += add
		return t
	}
	b := a.newBlock()
	*b = block{addr: e.base + e.mapped - add, size: add, prev: t, small: small, gen: b.gen, id: b.id}
	if t != nil {
		t.next = b
	} else {
		a.segments++
	}
	e.last = b
	a.blocks++
	return b
}

// trim unmaps the whole pages of the segment's free tail (what empty_cache
// does to an expandable segment's end) and returns the bytes released. Free
// blocks inside the segment stay mapped: PyTorch also unmaps those pages, so
// this model understates what expandable segments give back.
func (a *Allocator) trim(p *pool, e *expSeg) int64 {
	t := e.last
	if t == nil || t.allocated {
		return 0
	}
	start := e.base + (t.addr-e.base+e.page-1)/e.page*e.page
	rel := e.base + e.mapped - start
	if rel <= 0 {
		return 0
	}
	a.takeFree(p, t)
	e.mapped -= rel
	a.reserved -= rel
	if rel < t.size {
		t.size -= rel
		a.putFree(p, t)
		return rel
	}
	e.last = t.prev
	if t.prev != nil {
		t.prev.next = nil
		if pr := t.prev; !pr.allocated { // cannot happen: free neighbours are merged
			panic("sim: expandable segment tail next to a free block")
		}
	} else {
		a.segments--
	}
	a.blocks--
	a.recycle(t)
	return rel
}
