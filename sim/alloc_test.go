package sim

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// op is one step of an allocator scenario: alloc (name, size), free (name) or
// flush; want holds the figures that must hold after it.
type op struct {
	do      string // "alloc", "free", "flush"
	name    string
	size    int64
	wantErr error
	want    want
}

type want struct {
	reserved, allocated, inactive, largestCached int64
	segments, blocks                             int
	retries, ooms                                int64
}

func got(s AllocStats) want {
	return want{s.ReservedBytes, s.AllocatedBytes, s.InactiveSplitBytes, s.LargestCachedFreeBytes,
		s.Segments, s.Blocks, s.NumAllocRetries, s.NumOOMs}
}

func TestAllocator(t *testing.T) {
	tests := []struct {
		name     string
		settings AllocSettings
		ops      []op
	}{{
		name:     "small request rounds to 512 and splits a 2 MiB segment",
		settings: AllocSettings{DeviceBytes: 100 * mib},
		ops: []op{
			{do: "alloc", name: "a", size: 1, want: want{reserved: 2 * mib, allocated: 512,
				inactive: 2*mib - 512, largestCached: 2*mib - 512, segments: 1, blocks: 2}},
			{do: "alloc", name: "b", size: 513, want: want{reserved: 2 * mib, allocated: 1536,
				inactive: 2*mib - 1536, largestCached: 2*mib - 1536, segments: 1, blocks: 3}},
			{do: "free", name: "a", want: want{reserved: 2 * mib, allocated: 1024,
				inactive: 2*mib - 1024, largestCached: 2*mib - 1536, segments: 1, blocks: 3}},
			{do: "free", name: "b", want: want{reserved: 2 * mib, largestCached: 2 * mib, segments: 1, blocks: 1}},
			{do: "flush", want: want{}},
		},
	}, {
		name:     "large pool: 20 MiB segment below 10 MiB, split only above 1 MiB of rest",
		settings: AllocSettings{DeviceBytes: 100 * mib},
		ops: []op{
			{do: "alloc", name: "a", size: 3 * mib, want: want{reserved: 20 * mib, allocated: 3 * mib,
				inactive: 17 * mib, largestCached: 17 * mib, segments: 1, blocks: 2}},
			// 19.5 MiB ≥ 10 MiB: a 20 MiB segment, 0.5 MiB of rest is not split off.
			{do: "alloc", name: "b", size: 19*mib + mib/2, want: want{reserved: 40 * mib, allocated: 23 * mib,
				inactive: 17 * mib, largestCached: 17 * mib, segments: 2, blocks: 3}},
			// best fit: the 17 MiB cached block takes a 4 MiB request, 13 MiB stay.
			{do: "alloc", name: "c", size: 4 * mib, want: want{reserved: 40 * mib, allocated: 27 * mib,
				inactive: 13 * mib, largestCached: 13 * mib, segments: 2, blocks: 4}},
			{do: "free", name: "a", want: want{reserved: 40 * mib, allocated: 24 * mib,
				inactive: 16 * mib, largestCached: 13 * mib, segments: 2, blocks: 4}},
			// freeing c merges it with a before and the 13 MiB after: one whole segment.
			{do: "free", name: "c", want: want{reserved: 40 * mib, allocated: 20 * mib,
				largestCached: 20 * mib, segments: 2, blocks: 2}},
			// flush releases the free segment only; b's stays.
			{do: "flush", want: want{reserved: 20 * mib, allocated: 20 * mib, segments: 1, blocks: 1}},
		},
	}, {
		name:     "no fit and device short: flush wholly free segments, retry once, else OOM",
		settings: AllocSettings{DeviceBytes: 40 * mib},
		ops: []op{
			{do: "alloc", name: "a", size: 15 * mib, want: want{reserved: 16 * mib, allocated: 16 * mib,
				segments: 1, blocks: 1}},
			{do: "alloc", name: "b", size: 15 * mib, want: want{reserved: 32 * mib, allocated: 32 * mib,
				segments: 2, blocks: 2}},
			{do: "free", name: "a", want: want{reserved: 32 * mib, allocated: 16 * mib,
				largestCached: 16 * mib, segments: 2, blocks: 2}},
			// 20 MiB: cached 16 MiB too small, device has 8 MiB → flush a, retry succeeds.
			{do: "alloc", name: "c", size: 20 * mib, want: want{reserved: 36 * mib, allocated: 36 * mib,
				segments: 2, blocks: 2, retries: 1}},
			// 6 MiB needs a 20 MiB segment; 4 MiB left and nothing wholly free → OOM.
			{do: "alloc", name: "d", size: 6 * mib, wantErr: ErrOutOfMemory, want: want{reserved: 36 * mib,
				allocated: 36 * mib, segments: 2, blocks: 2, retries: 2, ooms: 1}},
		},
	}, {
		name:     "max_split_size keeps oversize blocks whole",
		settings: AllocSettings{DeviceBytes: 100 * mib, MaxSplitSize: 16 * mib},
		ops: []op{
			{do: "alloc", name: "a", size: 30 * mib, want: want{reserved: 30 * mib, allocated: 30 * mib,
				segments: 1, blocks: 1}},
			{do: "free", name: "a", want: want{reserved: 30 * mib, largestCached: 30 * mib, segments: 1, blocks: 1}},
			// a small request may not take the 30 MiB oversize block: new 20 MiB segment.
			{do: "alloc", name: "b", size: 3 * mib, want: want{reserved: 50 * mib, allocated: 3 * mib,
				inactive: 17 * mib, largestCached: 30 * mib, segments: 2, blocks: 3}},
			// 17 MiB ≥ max split: best fit is the 17 MiB rest; it is not split further.
			{do: "alloc", name: "c", size: 17 * mib, want: want{reserved: 50 * mib, allocated: 20 * mib,
				largestCached: 30 * mib, segments: 2, blocks: 3}},
			// 8 MiB: the 30 MiB block is oversize for it → new segment.
			{do: "alloc", name: "d", size: 8 * mib, want: want{reserved: 70 * mib, allocated: 28 * mib,
				inactive: 12 * mib, largestCached: 30 * mib, segments: 3, blocks: 5}},
		},
	}, {
		name:     "expandable segments grow the free tail in 20 MiB pages and merge across them",
		settings: AllocSettings{DeviceBytes: 100 * mib, ExpandableSegments: true},
		ops: []op{
			{do: "alloc", name: "a", size: 3 * mib, want: want{reserved: 20 * mib, allocated: 3 * mib,
				inactive: 17 * mib, largestCached: 17 * mib, segments: 1, blocks: 2}},
			// no cached block fits 30 MiB: the 17 MiB tail grows by one page to 37 MiB, 7 MiB stay.
			{do: "alloc", name: "b", size: 30 * mib, want: want{reserved: 40 * mib, allocated: 33 * mib,
				inactive: 7 * mib, largestCached: 7 * mib, segments: 1, blocks: 3}},
			{do: "free", name: "a", want: want{reserved: 40 * mib, allocated: 30 * mib,
				inactive: 10 * mib, largestCached: 7 * mib, segments: 1, blocks: 3}},
			// b merges with a and the tail: the whole 40 MiB is one block again.
			{do: "free", name: "b", want: want{reserved: 40 * mib, largestCached: 40 * mib, segments: 1, blocks: 1}},
			{do: "flush", want: want{}},
		},
	}, {
		name:     "expandable segments: retry after unmapping, then OOM",
		settings: AllocSettings{DeviceBytes: 40 * mib, ExpandableSegments: true},
		ops: []op{
			{do: "alloc", name: "a", size: 15 * mib, want: want{reserved: 20 * mib, allocated: 15 * mib,
				inactive: 5 * mib, largestCached: 5 * mib, segments: 1, blocks: 2}},
			// 30 MiB needs two more pages; the device has one; the 5 MiB tail holds no whole page.
			{do: "alloc", name: "b", size: 30 * mib, wantErr: ErrOutOfMemory, want: want{reserved: 20 * mib,
				allocated: 15 * mib, inactive: 5 * mib, largestCached: 5 * mib, segments: 1, blocks: 2, retries: 1, ooms: 1}},
			// 20 MiB: the tail grows by one page to 25 MiB, 5 MiB stay.
			{do: "alloc", name: "c", size: 20 * mib, want: want{reserved: 40 * mib, allocated: 35 * mib,
				inactive: 5 * mib, largestCached: 5 * mib, segments: 1, blocks: 3, retries: 1, ooms: 1}},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAllocator(tt.settings)
			if err != nil {
				t.Fatal(err)
			}
			live := map[string]Buffer{}
			for i, o := range tt.ops {
				switch o.do {
				case "alloc":
					b, err := a.Alloc(o.size)
					if !errors.Is(err, o.wantErr) {
						t.Fatalf("step %d: Alloc(%d) error = %v, want %v", i, o.size, err, o.wantErr)
					}
					if err == nil {
						live[o.name] = b
					}
				case "free":
					if err := a.Free(live[o.name]); err != nil {
						t.Fatalf("step %d: Free(%s) = %v", i, o.name, err)
					}
					delete(live, o.name)
				case "flush":
					a.EmptyCache()
				}
				if g := got(a.Stats()); g != o.want {
					t.Fatalf("step %d (%s %s): stats = %+v, want %+v", i, o.do, o.name, g, o.want)
				}
			}
		})
	}
}

func TestAllocatorFragmentationRatio(t *testing.T) {
	tests := []struct {
		name       string
		device     int64
		sizes      []int64 // allocated in order
		free       []int   // then these (indices into sizes) freed
		wantFree   int64
		wantLarge  int64
		expandable bool
	}{
		{"empty device is one block", 40 * mib, nil, nil, 40 * mib, 40 * mib, false},
		// 3 MiB in a 20 MiB segment (17 MiB cached free), 18 MiB segment: device has 2 MiB left.
		{"cached rest is the largest piece", 40 * mib, []int64{3 * mib, 18 * mib}, nil, 19 * mib, 17 * mib, false},
		// 3 MiB in a 20 MiB segment; device keeps 80 MiB.
		{"device free is the largest piece", 100 * mib, []int64{3 * mib}, nil, 97 * mib, 80 * mib, false},
		// The 18 MiB segment freed whole: a flush gives it back, so it joins
		// the device's 2 MiB (20 MiB) ahead of the 17 MiB stranded in the
		// split segment; free = 2 + 17 + 18.
		{"a wholly free segment joins the device", 40 * mib, []int64{3 * mib, 18 * mib}, []int{1}, 37 * mib, 20 * mib, false},
		// 100 − 20 − 12 = 68 MiB on the device, + the freed 12 MiB segment; the
		// 17 MiB split rest is the only stranded piece.
		{"stranded split rest is the fragmentation", 100 * mib, []int64{3 * mib, 12 * mib}, []int{1}, 97 * mib, 80 * mib, false},
		// expandable: the 17 MiB free tail extends into the device's 80 MiB.
		{"expandable tail joins the device", 100 * mib, []int64{3 * mib}, nil, 97 * mib, 97 * mib, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAllocator(AllocSettings{DeviceBytes: tt.device, ExpandableSegments: tt.expandable})
			if err != nil {
				t.Fatal(err)
			}
			var blocks []Buffer
			for _, s := range tt.sizes {
				b, err := a.Alloc(s)
				if err != nil {
					t.Fatal(err)
				}
				blocks = append(blocks, b)
			}
			for _, i := range tt.free {
				if err := a.Free(blocks[i]); err != nil {
					t.Fatal(err)
				}
			}
			s := a.Stats()
			if s.FreeBytes() != tt.wantFree || s.LargestFreeBlockBytes() != tt.wantLarge {
				t.Fatalf("free, largest = %d, %d, want %d, %d", s.FreeBytes(), s.LargestFreeBlockBytes(), tt.wantFree, tt.wantLarge)
			}
			want := float64(tt.wantLarge) / float64(tt.wantFree)
			if r := s.FragmentationRatio(); r != want {
				t.Fatalf("FragmentationRatio() = %v, want %v", r, want)
			}
		})
	}
}

func TestAllocatorErrors(t *testing.T) {
	if _, err := NewAllocator(AllocSettings{}); err == nil {
		t.Fatal("NewAllocator(zero) = nil error, want one naming DeviceBytes")
	}
	a, _ := NewAllocator(AllocSettings{DeviceBytes: 10 * mib})
	b, _ := a.Alloc(100)
	if err := a.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(b); !errors.Is(err, ErrBadFree) {
		t.Fatalf("double Free = %v, want ErrBadFree", err)
	}
	if err := a.Free(Buffer{}); !errors.Is(err, ErrBadFree) {
		t.Fatalf("Free(zero) = %v, want ErrBadFree", err)
	}
}

// TestAllocatorInvariants runs a random mix of allocations and frees and checks
// after every step that the incremental counters match a recount of the blocks
// and that no two free blocks are neighbours.
func TestAllocatorInvariants(t *testing.T) {
	for _, exp := range []bool{false, true} {
		checkRandomRun(t, AllocSettings{DeviceBytes: 2 * gib, ExpandableSegments: exp})
	}
}

func checkRandomRun(t *testing.T, s AllocSettings) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	a, _ := NewAllocator(s)
	var live []Buffer
	for i := range 20000 {
		switch {
		case r.IntN(10) == 0:
			a.EmptyCache()
		case len(live) > 0 && r.IntN(2) == 0:
			j := r.IntN(len(live))
			if err := a.Free(live[j]); err != nil {
				t.Fatal(err)
			}
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			n := int64(r.IntN(4 * mib))
			if r.IntN(8) == 0 {
				n = int64(r.IntN(200 * mib))
			}
			if b, err := a.Alloc(n); err == nil {
				live = append(live, b)
			}
		}
		checkInvariants(t, i, a, live)
	}
}

func checkInvariants(t *testing.T, step int, a *Allocator, live []Buffer) {
	t.Helper()
	var alloc, free, inact int64
	blocks := 0
	for _, b := range live {
		alloc += b.Size()
		blocks++
	}
	for _, p := range []*pool{&a.small, &a.large} {
		for i := 1; i < len(p.blocks); i++ {
			if p.blocks[i].before(p.blocks[i-1].size, p.blocks[i-1].addr) {
				t.Fatalf("step %d: pool out of order at %d", step, i)
			}
		}
		for _, en := range p.blocks {
			b := a.records[en.id]
			if en.size != b.size || en.addr != b.addr {
				t.Fatalf("step %d: pool key out of date", step)
			}
			if b.allocated {
				t.Fatalf("step %d: allocated block in a pool", step)
			}
			if (b.prev != nil && !b.prev.allocated) || (b.next != nil && !b.next.allocated) {
				t.Fatalf("step %d: two free neighbours were not merged", step)
			}
			free += b.size
			if b.split() {
				inact += b.size
			}
			blocks++
		}
	}
	s := a.Stats()
	if s.AllocatedBytes != alloc || s.CachedFreeBytes != free || s.InactiveSplitBytes != inact || s.Blocks != blocks {
		t.Fatalf("step %d: stats %+v disagree with recount alloc=%d free=%d inactive=%d blocks=%d",
			step, s, alloc, free, inact, blocks)
	}
	if s.ReservedBytes > s.DeviceBytes {
		t.Fatalf("step %d: reserved %d > device %d", step, s.ReservedBytes, s.DeviceBytes)
	}
	if a.s.ExpandableSegments {
		mapped := a.expSmall.mapped + a.expLarge.mapped
		for _, e := range []*expSeg{&a.expSmall, &a.expLarge} {
			if (e.last == nil) != (e.mapped == 0) || (e.last != nil && (e.last.next != nil || e.last.addr+e.last.size != e.base+e.mapped)) {
				t.Fatalf("step %d: expandable segment's last block out of date", step)
			}
		}
		if mapped != s.ReservedBytes || s.Segments > 2 {
			t.Fatalf("step %d: mapped %d, reserved %d, segments %d", step, mapped, s.ReservedBytes, s.Segments)
		}
	}
}

func BenchmarkAllocatorMixed(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	a, _ := NewAllocator(AllocSettings{DeviceBytes: 8 * gib})
	live := make([]Buffer, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		if len(live) > 512 || (len(live) > 0 && r.IntN(2) == 0) {
			j := r.IntN(len(live))
			_ = a.Free(live[j])
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		if buf, err := a.Alloc(int64(r.IntN(64 * mib))); err == nil {
			live = append(live, buf)
		}
	}
}

func TestAllocatorStaleBufferAfterReuse(t *testing.T) {
	a, _ := NewAllocator(AllocSettings{DeviceBytes: 100 * mib})
	x, _ := a.Alloc(1000)
	y, _ := a.Alloc(1000)
	_ = a.Free(y) // y merges with the free rest: one record is recycled
	_ = a.Free(x) // x merges with it: another record is recycled
	a.EmptyCache()
	z, _ := a.Alloc(1000) // reuses a recycled record
	for _, stale := range []Buffer{x, y} {
		if err := a.Free(stale); !errors.Is(err, ErrBadFree) {
			t.Fatalf("Free(stale) = %v, want ErrBadFree", err)
		}
	}
	if err := a.Free(z); err != nil {
		t.Fatalf("Free(z) = %v", err)
	}
}
