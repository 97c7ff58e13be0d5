package sim

// EmptyCache releases every cached segment that is wholly free back to the
// device, like torch.cuda.empty_cache(); with ExpandableSegments it unmaps
// the free pages at the end of each pool's segment. It returns the bytes
// released.
func (a *Allocator) EmptyCache() int64 {
	a.version++
	if a.s.ExpandableSegments {
		return a.trim(&a.small, &a.expSmall) + a.trim(&a.large, &a.expLarge)
	}
	var released int64
	for _, p := range []*pool{&a.small, &a.large} {
		kept := p.blocks[:0]
		for _, en := range p.blocks {
			b := a.records[en.id]
			if b.split() {
				kept = append(kept, en)
				continue
			}
			released += b.size
			a.touch(b)
			a.touchSegment(b.addr, b.size, b.small)
			a.reserved -= b.size
			a.segments--
			a.blocks--
			a.recycle(b)
		}
		clear(p.blocks[len(kept):])
		p.blocks = kept
	}
	return released
}

func (a *Allocator) putFree(p *pool, b *block) {
	if b.split() {
		a.inactSplit += b.size
	}
	p.insert(b)
}

func (a *Allocator) takeFree(p *pool, b *block) {
	if b.split() {
		a.inactSplit -= b.size
	}
	p.remove(b)
}
