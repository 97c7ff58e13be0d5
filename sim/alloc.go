package sim

import (
	"errors"
	"fmt"
)

// Constants of PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize, kSmallSize, kSmallBuffer,
// kLargeBuffer, kMinLargeAlloc, kRoundLarge).
const (
	minBlockSize  = 512       // every request is rounded up to a multiple of this
	smallSize     = 1 << 20   // requests up to this size use the small pool
	smallBuffer   = 2 << 20   // segment size of the small pool
	largeBuffer   = 20 << 20  // segment size for large requests below minLargeAlloc
	minLargeAlloc = 10 << 20  // from this size up, segments are the request rounded to roundLarge
	roundLarge    = 2 << 20   // rounding of large segments
	mib           = 1 << 20   // one mebibyte
	gib           = 1 << 30   // one gibibyte
	maxInt64      = 1<<63 - 1 // largest int64
)

// ErrOutOfMemory is returned by Allocator.Alloc when no cached block fits and the
// device refuses a new segment even after the cache has been flushed.
var ErrOutOfMemory = errors.New("sim: CUDA out of memory")

// ErrBadFree is returned by Allocator.Free for a buffer that is not live.
var ErrBadFree = errors.New("sim: free of a buffer that is not allocated")

// AllocSettings configures an Allocator.
type AllocSettings struct {
	// DeviceBytes is how many bytes the device (the "driver") can hand out as
	// segments to this allocator. Must be > 0.
	DeviceBytes int64
	// MaxSplitSize mirrors PYTORCH_CUDA_ALLOC_CONF max_split_size_mb, in bytes:
	// cached blocks of at least this size are never split. 0 means unlimited
	// (PyTorch's default).
	MaxSplitSize int64
	// ExpandableSegments mirrors expandable_segments:True: each pool has one
	// segment that grows at its end in pages instead of taking new segments.
	ExpandableSegments bool
}

// Allocator simulates PyTorch's CUDA caching allocator on one device and one
// stream: 512-byte rounding, a small and a large pool, best-fit reuse of cached
// blocks, splitting, merging of freed neighbours inside a segment, segments
// released to the device only by a flush, and one flush-and-retry before an
// out-of-memory error. Create one with NewAllocator. Not safe for concurrent use;
// it must not be copied.
type Allocator struct {
	s           AllocSettings
	reserved    int64 // bytes of all segments held from the device
	allocated   int64 // bytes of live blocks (block sizes, as PyTorch counts them)
	inactSplit  int64 // free bytes in segments that are split
	nextAddr    int64 // virtual address of the next segment
	segments    int
	blocks      int
	retries     int64
	ooms        int64
	small       pool
	large       pool
	requested   int64 // bytes asked for by live allocations, before rounding
	peakAlloc   int64
	peakReserve int64
	spare       []*block // recycled block records, to spare the garbage collector
	records     []*block // every record ever made, by id: pools hold ids, not pointers
	version     uint64   // bumped by every call that changes the state
	largeHash   uint64   // the large pool's blocks and segments (alloc_hash.go)
	expSmall    expSeg   // with ExpandableSegments: the pools' segments
	expLarge    expSeg
}

// Buffer is a live allocation returned by Allocator.Alloc. Free it exactly once.
// The zero Buffer is not a valid allocation.
type Buffer struct {
	b   *block
	gen uint32 // the record's generation when allocated: stale copies are refused
	req int64
}

// Size returns the bytes the allocator set aside for the buffer (the block size,
// at least the request rounded to 512 bytes).
func (b Buffer) Size() int64 {
	if b.b == nil {
		return 0
	}
	return b.b.size
}

// Valid reports whether b came from a successful Alloc.
func (b Buffer) Valid() bool { return b.b != nil }

// block is a contiguous range of one segment; prev and next link the blocks of
// the segment in address order.
type block struct {
	addr, size int64
	prev, next *block
	allocated  bool
	small      bool
	gen        uint32 // bumped when the record is recycled
	id         int32  // the record's permanent index in Allocator.records
	at         int32  // where its pool entry was last put (a hint for pool.find)
}

func (b *block) split() bool { return b.prev != nil || b.next != nil }

// NewAllocator returns an empty allocator over a device of s.DeviceBytes.
func NewAllocator(s AllocSettings) (*Allocator, error) {
	if s.DeviceBytes <= 0 {
		return nil, fmt.Errorf("sim: AllocSettings.DeviceBytes = %d, want > 0", s.DeviceBytes)
	}
	if s.MaxSplitSize < 0 {
		return nil, fmt.Errorf("sim: AllocSettings.MaxSplitSize = %d, want >= 0", s.MaxSplitSize)
	}
	return &Allocator{s: s, nextAddr: 1 << 40}, nil
}

// roundSize rounds a request up to a multiple of 512 bytes (at least 512).
func roundSize(n int64) int64 {
	if n < minBlockSize {
		return minBlockSize
	}
	return (n + minBlockSize - 1) / minBlockSize * minBlockSize
}

// segmentSize is the size of the segment requested from the device for a
// rounded request that found no cached block.
func segmentSize(size int64) int64 {
	switch {
	case size <= smallSize:
		return smallBuffer
	case size < minLargeAlloc:
		return largeBuffer
	default:
		return (size + roundLarge - 1) / roundLarge * roundLarge
	}
}

func (a *Allocator) maxSplit() int64 {
	if a.s.MaxSplitSize == 0 {
		return maxInt64
	}
	return a.s.MaxSplitSize
}

// Alloc returns a buffer of at least n bytes. It fails with ErrOutOfMemory
// (wrapped, with the figures PyTorch prints) when even a flush does not make
// room; the allocator's state stays consistent after a failure.
func (a *Allocator) Alloc(n int64) (Buffer, error) {
	if n < 0 {
		return Buffer{}, fmt.Errorf("sim: alloc of %d bytes", n)
	}
	a.version++
	size := roundSize(n)
	isSmall := size <= smallSize
	p := &a.large
	if isSmall {
		p = &a.small
	}
	b, at := a.freeBlock(p, size) // at: b's index in the pool
	cached := b != nil
	if !cached {
		take := func() *block { return a.newSegment(segmentSize(size), isSmall) }
		if a.s.ExpandableSegments {
			take = func() *block { return a.grow(p, size, isSmall) }
		}
		b = take()
		if b == nil {
			a.EmptyCache()
			a.retries++ // PyTorch counts the retry whether or not it succeeds
			b = take()
		}
		if b == nil {
			a.ooms++
			return Buffer{}, fmt.Errorf("%w: tried to allocate %d bytes; %d free on the device, "+
				"%d reserved by PyTorch, %d reserved but unallocated", ErrOutOfMemory, size,
				a.s.DeviceBytes-a.reserved, a.reserved, a.reserved-a.allocated)
		}
	}
	a.touch(b) // out: b changes below
	switch {
	case a.shouldSplit(b, size):
		if cached && b.split() {
			a.inactSplit -= b.size
		}
		rest := a.newBlock()
		*rest = block{addr: b.addr + size, size: b.size - size, prev: b, next: b.next, small: b.small, gen: rest.gen, id: rest.id}
		if b.next != nil {
			b.next.prev = rest
		}
		b.next = rest
		b.size = size
		a.blocks++
		if e := a.expOf(b.small); e.last == b {
			e.last = rest
		}
		a.inactSplit += rest.size // rest has b before it: split
		a.touch(rest)
		if cached {
			p.move(at, rest) // the rest takes b's place in the pool: one short memmove
		} else {
			p.insert(rest)
		}
	case cached:
		if b.split() {
			a.inactSplit -= b.size
		}
		p.removeAt(at)
	}
	b.allocated = true
	a.touch(b) // in
	a.allocated += b.size
	a.requested += n
	a.peakAlloc = max(a.peakAlloc, a.allocated)
	return Buffer{b: b, gen: b.gen, req: n}, nil
}

// freeBlock finds the best-fitting cached block and its index in the pool,
// applying max_split_size's two refusals (an oversize block is not handed to
// a small request, and not to a large request it would exceed by a whole
// large buffer).
func (a *Allocator) freeBlock(p *pool, size int64) (*block, int) {
	i, id := p.lowerBound(size)
	if id < 0 {
		return nil, -1
	}
	b := a.records[id]
	if ms := a.maxSplit(); ms != maxInt64 {
		if size < ms && b.size >= ms {
			return nil, -1
		}
		if size >= ms && b.size >= size+largeBuffer {
			return nil, -1
		}
	}
	return b, i
}

func (a *Allocator) shouldSplit(b *block, size int64) bool {
	rest := b.size - size
	if b.small {
		return rest >= minBlockSize
	}
	return size < a.maxSplit() && rest > smallSize
}

// newSegment takes a segment from the device, or returns nil when the device
// has too little left.
func (a *Allocator) newSegment(size int64, small bool) *block {
	if a.reserved+size > a.s.DeviceBytes {
		return nil
	}
	b := a.newBlock()
	*b = block{addr: a.nextAddr, size: size, small: small, gen: b.gen, id: b.id}
	a.nextAddr += size
	a.reserved += size
	a.peakReserve = max(a.peakReserve, a.reserved)
	a.segments++
	a.blocks++
	a.touchSegment(b.addr, size, small)
	a.touch(b)
	return b
}

// Free returns a buffer to its pool, merging it with free neighbours in its
// segment. The segment stays reserved until EmptyCache.
func (a *Allocator) Free(buf Buffer) error {
	b := buf.b
	if b == nil || !b.allocated || b.gen != buf.gen {
		return ErrBadFree
	}
	a.version++
	p := &a.large
	if b.small {
		p = &a.small
	}
	a.touch(b) // out: b changes below
	b.allocated = false
	a.allocated -= b.size
	a.requested -= buf.req
	pr, nx := b.prev, b.next
	if pr != nil && pr.allocated {
		pr = nil
	}
	if nx != nil && nx.allocated {
		nx = nil
	}
	if pr == nil && nx == nil {
		a.touch(b) // in
		a.putFree(p, b)
		return nil
	}
	// Merge: the free neighbours leave the pool and b, grown, takes the
	// last one's place (one short memmove instead of a removal and an insert).
	last := nx
	if last == nil {
		last = pr
	} else if pr != nil {
		a.takeFree(p, pr)
	}
	at := p.find(last)
	a.inactSplit -= last.size // a free neighbour of b is in a split segment
	if pr != nil {
		a.touch(pr) // out: merged into b
	}
	if nx != nil {
		a.touch(nx)
	}
	if pr != nil {
		b.addr = pr.addr
		b.size += pr.size
		b.prev = pr.prev
		if b.prev != nil {
			b.prev.next = b
		}
		a.blocks--
	}
	if nx != nil {
		b.size += nx.size
		b.next = nx.next
		if b.next != nil {
			b.next.prev = b
		}
		a.blocks--
		if e := a.expOf(b.small); e.last == nx {
			e.last = b
		}
	}
	p.move(at, b)
	a.touch(b) // in
	if b.split() {
		a.inactSplit += b.size
	}
	if pr != nil {
		a.recycle(pr)
	}
	if nx != nil {
		a.recycle(nx)
	}
	return nil
}

func (a *Allocator) newBlock() *block {
	if n := len(a.spare); n > 0 {
		b := a.spare[n-1]
		a.spare = a.spare[:n-1]
		return b
	}
	b := &block{id: int32(len(a.records))}
	a.records = append(a.records, b)
	return b
}

// recycle keeps a merged-away or released block record for reuse; its
// generation changes so a stale Buffer copy cannot free the next owner.
func (a *Allocator) recycle(b *block) {
	*b = block{gen: b.gen + 1, id: b.id}
	a.spare = append(a.spare, b)
}
