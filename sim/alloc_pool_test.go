package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSearchIn checks the lower bound, whole and from an offset, against the standard
// library's binary search on sorted keys with many ties in size.
func TestSearchIn(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	cmp := func(e entry, k entry) int {
		if e.size != k.size {
			return int(e.size - k.size)
		}
		return int(e.addr - k.addr)
	}
	for n := range 70 {
		s := make([]entry, n)
		for i := range s {
			s[i] = entry{size: int64(1+r.IntN(8)) * minBlockSize, addr: 1<<40 + int64(r.IntN(64))*minBlockSize}
		}
		slices.SortFunc(s, cmp)
		s = slices.CompactFunc(s, func(a, b entry) bool { return cmp(a, b) == 0 })
		for size := int64(0); size <= 10*minBlockSize; size += minBlockSize / 2 {
			for _, addr := range []int64{0, 1 << 40, 1<<40 + 7*minBlockSize, 1<<40 + 64*minBlockSize, maxInt64} {
				want, _ := slices.BinarySearchFunc(s, entry{size: size, addr: addr}, cmp)
				if got := searchIn(s, 0, size, addr); got != want {
					t.Fatalf("searchIn(%v, 0, %d, %d) = %d, want %d", s, size, addr, got, want)
				}
				if len(s) > 3 {
					off := len(s) / 2
					w := want
					if w < off {
						w = off
					}
					if got := searchIn(s[off:], off, size, addr); got != w {
						t.Fatalf("searchIn(s[%d:], %d, %d, %d) = %d, want %d", off, off, size, addr, got, w)
					}
				}
			}
		}
	}
}
