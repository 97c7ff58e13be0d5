package sim

import "slices"

// pool holds the cached free blocks of one size class, sorted by (size,
// address) like PyTorch's BlockComparatorSize, so best fit is a binary search.
// A sorted slice keeps inserts and removals to one memmove of pointers, which
// stays cheap for the thousands of blocks a long run can cache.
type pool struct {
	blocks []entry
}

// entry keeps a block's sort key inline, so the binary search reads one
// contiguous array instead of chasing a pointer per probe, and names the
// block by id: without pointers, inserts and removals are plain memmoves.
type entry struct {
	size, addr int64
	id         int32
}

// search returns the index of the first block not less than (size, addr).
func (p *pool) search(size, addr int64) int {
	lo, hi := 0, len(p.blocks)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		b := &p.blocks[m]
		if b.size < size || (b.size == size && b.addr < addr) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (p *pool) insert(b *block) {
	p.blocks = slices.Insert(p.blocks, p.search(b.size, b.addr), entry{b.size, b.addr, b.id})
}

func (p *pool) remove(b *block) {
	i := p.search(b.size, b.addr)
	if i == len(p.blocks) || p.blocks[i].id != b.id {
		panic("sim: allocator pool lost a block") // an internal invariant, never input-driven
	}
	p.blocks = slices.Delete(p.blocks, i, i+1)
}

// move replaces the entry old (in the pool) by b's current key, shifting
// only the entries between the two positions.
func (p *pool) move(old entry, b *block) {
	i := p.search(old.size, old.addr)
	if i == len(p.blocks) || p.blocks[i].id != old.id {
		panic("sim: allocator pool lost a block") // an internal invariant, never input-driven
	}
	e := entry{b.size, b.addr, b.id}
	j := p.search(e.size, e.addr) // among the entries that still include old
	switch {
	case j > i: // e sorts after old: close the gap leftwards
		copy(p.blocks[i:j-1], p.blocks[i+1:j])
		p.blocks[j-1] = e
	default: // e sorts before old: open a gap at j
		copy(p.blocks[j+1:i+1], p.blocks[j:i])
		p.blocks[j] = e
	}
}

// lowerBound returns the id of the smallest cached block of at least size
// bytes (the lowest address among equals), or -1.
func (p *pool) lowerBound(size int64) int32 {
	i := p.search(size, 0)
	if i == len(p.blocks) {
		return -1
	}
	return p.blocks[i].id
}

// largest returns the size of the biggest cached block, or 0.
func (p *pool) largest() int64 {
	if len(p.blocks) == 0 {
		return 0
	}
	return p.blocks[len(p.blocks)-1].size
}
