package sim

import "slices"

// pool holds the cached free blocks of one size class, sorted by (size,
// address) like PyTorch's BlockComparatorSize, so best fit is a binary search.
// A sorted slice keeps inserts and removals to one memmove of pointers, which
// stays cheap for the thousands of blocks a long run can cache.
type pool struct {
	blocks []*block
}

func blockCmp(x, y *block) int {
	switch {
	case x.size != y.size:
		if x.size < y.size {
			return -1
		}
		return 1
	case x.addr < y.addr:
		return -1
	case x.addr > y.addr:
		return 1
	}
	return 0
}

func (p *pool) insert(b *block) {
	i, _ := slices.BinarySearchFunc(p.blocks, b, blockCmp)
	p.blocks = slices.Insert(p.blocks, i, b)
}

func (p *pool) remove(b *block) {
	i, ok := slices.BinarySearchFunc(p.blocks, b, blockCmp)
	if !ok {
		panic("sim: allocator pool lost a block") // an internal invariant, never input-driven
	}
	p.blocks = slices.Delete(p.blocks, i, i+1)
}

// lowerBound returns the smallest cached block of at least size bytes, or nil.
func (p *pool) lowerBound(size int64) *block {
	i, _ := slices.BinarySearchFunc(p.blocks, size, func(b *block, s int64) int {
		switch {
		case b.size < s:
			return -1
		case b.size > s:
			return 1
		}
		return 0
	})
	if i == len(p.blocks) {
		return nil
	}
	return p.blocks[i]
}

// largest returns the size of the biggest cached block, or 0.
func (p *pool) largest() int64 {
	if len(p.blocks) == 0 {
		return 0
	}
	return p.blocks[len(p.blocks)-1].size
}
