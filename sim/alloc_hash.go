package sim

// The large pool's state hash lets the engine recognise a step it has run
// before on the same cached blocks (engine_sched.go): a Zobrist hash, the
// XOR of one mixed word per large-pool block (address, size, allocated) and
// per large segment (address, size), updated as blocks change. With
// ExpandableSegments it is not kept (the engine does not memoise then).

// mix64 is SplitMix64's finaliser: a cheap bijection that spreads every
// input bit over the output.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// touch toggles large block b's current state in the hash: called once
// before b changes (out) and once after (in).
func (a *Allocator) touch(b *block) {
	if b.small {
		return
	}
	x := uint64(b.addr)*0x9e3779b97f4a7c15 ^ uint64(b.size)
	if b.allocated {
		x ^= 1 << 63
	}
	a.largeHash ^= mix64(x)
}

// touchSegment toggles a large segment of size bytes at addr in the hash.
func (a *Allocator) touchSegment(addr, size int64, small bool) {
	if !small {
		a.largeHash ^= mix64(uint64(addr)*0xc2b2ae3d27d4eb4f ^ uint64(size) ^ 0x5e6)
	}
}
