package sim

// AllocStats is a snapshot of an Allocator, in PyTorch's terms.
type AllocStats struct {
	// DeviceBytes is the capacity the allocator draws segments from.
	DeviceBytes int64
	// AllocatedBytes is the size of all live blocks (allocated_bytes.all.current).
	AllocatedBytes int64
	// RequestedBytes is what the live allocations asked for, before rounding.
	RequestedBytes int64
	// ReservedBytes is the size of all segments held (reserved_bytes.all.current).
	ReservedBytes int64
	// InactiveSplitBytes is free memory inside segments that are split
	// (inactive_split_bytes.all.current): cached, but only usable in pieces.
	InactiveSplitBytes int64
	// DeviceFreeBytes is what the device can still hand out as new segments.
	DeviceFreeBytes int64
	// CachedFreeBytes is free memory inside held segments (reserved − allocated).
	CachedFreeBytes int64
	// LargestCachedFreeBytes is the biggest free block inside held segments.
	LargestCachedFreeBytes int64
	// ReleasableBytes is the cached free memory in wholly free segments
	// (CachedFreeBytes − InactiveSplitBytes): a flush hands it back to the
	// device, and so does the allocator's own flush-and-retry before it
	// fails an allocation. 0 with expandable segments (TailFreeBytes
	// stands for it there).
	ReleasableBytes int64
	// TailFreeBytes is, with expandable segments, the free block at the end
	// of the large pool's segment: a large request can extend it with what
	// the device still has. 0 otherwise.
	TailFreeBytes int64
	// Segments and Blocks count held segments and all blocks (live and cached).
	Segments, Blocks int
	// NumAllocRetries counts allocations retried after a flush (num_alloc_retries).
	NumAllocRetries int64
	// NumOOMs counts allocations that failed after the retry (num_ooms).
	NumOOMs int64
	// PeakAllocatedBytes and PeakReservedBytes are the high-water marks.
	PeakAllocatedBytes, PeakReservedBytes int64
}

// FreeBytes is DESIGN §3's free_bytes: what the device can still hand out plus
// the free blocks cached inside segments.
func (s AllocStats) FreeBytes() int64 { return s.DeviceFreeBytes + s.CachedFreeBytes }

// LargestFreeBlockBytes is DESIGN §3's largest_free_block_bytes, as the
// project's docs/design.md defines it: the most one allocation can
// get, counting the allocator's flush-and-retry. That is the larger of the
// biggest cached free block and the device's remaining memory plus the
// wholly free segments a flush returns to it (with expandable segments:
// plus the free tail a request would extend). So only memory stranded in
// split segments (InactiveSplitBytes) reads as fragmentation; a cache of
// whole free segments, which PyTorch reclaims before it fails, does not.
func (s AllocStats) LargestFreeBlockBytes() int64 {
	return max(s.DeviceFreeBytes+s.ReleasableBytes+s.TailFreeBytes, s.LargestCachedFreeBytes)
}

// FragmentationRatio is largest free block ÷ free bytes (≤ 1; 1 when all free
// memory is one piece, and 1 when nothing is free, so a full but unfragmented
// device does not read as fragmented).
func (s AllocStats) FragmentationRatio() float64 {
	free := s.FreeBytes()
	if free <= 0 {
		return 1
	}
	return float64(s.LargestFreeBlockBytes()) / float64(free)
}

// Stats returns a snapshot of the allocator's counters.
func (a *Allocator) Stats() AllocStats {
	return AllocStats{
		DeviceBytes:            a.s.DeviceBytes,
		AllocatedBytes:         a.allocated,
		RequestedBytes:         a.requested,
		ReservedBytes:          a.reserved,
		InactiveSplitBytes:     a.inactSplit,
		DeviceFreeBytes:        a.s.DeviceBytes - a.reserved,
		CachedFreeBytes:        a.reserved - a.allocated,
		LargestCachedFreeBytes: max(a.small.largest(), a.large.largest()),
		ReleasableBytes:        a.releasable(),
		TailFreeBytes:          a.tailFree(),
		Segments:               a.segments,
		Blocks:                 a.blocks,
		NumAllocRetries:        a.retries,
		NumOOMs:                a.ooms,
		PeakAllocatedBytes:     a.peakAlloc,
		PeakReservedBytes:      a.peakReserve,
	}
}

func (a *Allocator) releasable() int64 {
	if a.s.ExpandableSegments {
		return 0
	}
	return a.reserved - a.allocated - a.inactSplit
}

func (a *Allocator) tailFree() int64 {
	if t := a.expLarge.last; t != nil && !t.allocated {
		return t.size
	}
	return 0
}

// ResetPeakStats starts the peak figures again from the current ones, as
// torch.cuda.reset_peak_memory_stats() does.
func (a *Allocator) ResetPeakStats() { a.peakAlloc, a.peakReserve = a.allocated, a.reserved }
