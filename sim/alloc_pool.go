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

// before reports whether e sorts before (size, addr).
func (e *entry) before(size, addr int64) bool {
	return e.size < size || (e.size == size && e.addr < addr)
}

// search returns the index of the first block not less than (size, addr).
func (p *pool) search(size, addr int64) int { return searchIn(p.blocks, 0, size, addr) }

// searchIn returns off plus the index of the first entry of s not less than
// (size, addr). (A branchless variant was measured slower in the replay: a
// step repeats the same requests, so the branch predictor learns the path.)
func searchIn(s []entry, off int, size, addr int64) int {
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m].before(size, addr) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return off + lo
}

func (p *pool) insert(b *block) {
	i := p.search(b.size, b.addr)
	p.blocks = slices.Insert(p.blocks, i, entry{b.size, b.addr, b.id})
	b.at = int32(i)
}

// find returns the index of b's entry; the entry must be there. It tries
// where the entry was put first: later inserts and removals shift entries,
// but often not that one, and a block's id is in at most one entry.
func (p *pool) find(b *block) int {
	if i := int(b.at); i < len(p.blocks) && p.blocks[i].id == b.id {
		return i
	}
	i := p.search(b.size, b.addr)
	if i == len(p.blocks) || p.blocks[i].id != b.id {
		panic("sim: allocator pool lost a block") // an internal invariant, never input-driven
	}
	return i
}

func (p *pool) remove(b *block) { p.removeAt(p.find(b)) }

// removeAt drops the entry at index i.
func (p *pool) removeAt(i int) { p.blocks = slices.Delete(p.blocks, i, i+1) }

// move replaces the entry at index i by b's current key, shifting only the
// entries between the two positions. The new position is searched for on
// the side of i where it lies: a split's rest sorts before the block it came
// from, a merged block after the neighbour whose place it takes.
func (p *pool) move(i int, b *block) {
	e := entry{b.size, b.addr, b.id}
	if p.blocks[i].before(e.size, e.addr) { // e sorts after the old entry: close the gap leftwards
		j := searchIn(p.blocks[i+1:], i+1, e.size, e.addr)
		copy(p.blocks[i:j-1], p.blocks[i+1:j])
		p.blocks[j-1] = e
		b.at = int32(j - 1)
		return
	}
	j := searchIn(p.blocks[:i], 0, e.size, e.addr) // e sorts before: open a gap at j
	copy(p.blocks[j+1:i+1], p.blocks[j:i])
	p.blocks[j] = e
	b.at = int32(j)
}

// lowerBound returns the index of the smallest cached block of at least size
// bytes (the lowest address among equals) and its id, or -1, -1.
func (p *pool) lowerBound(size int64) (int, int32) {
	i := p.search(size, 0)
	if i == len(p.blocks) {
		return -1, -1
	}
	return i, p.blocks[i].id
}

// largest returns the size of the biggest cached block, or 0.
func (p *pool) largest() int64 {
	if len(p.blocks) == 0 {
		return 0
	}
	return p.blocks[len(p.blocks)-1].size
}
