package route

import "github.com/hashicorp/golang-lru/v2/simplelru"

// index is one pod's LRU of the prefix block hashes sent to it.
type index struct {
	lru *simplelru.LRU[uint64, struct{}]
}

func newIndex(capacity int) *index {
	l, err := simplelru.NewLRU[uint64, struct{}](capacity, nil)
	if err != nil {
		panic(err) // capacity is checked by New
	}
	return &index{lru: l}
}

// match returns how many of blocks' leading hashes the pod holds, up to the
// first miss. It does not touch their recency: only a request sent there
// does (add).
func (x *index) match(blocks []uint64) int {
	for i, h := range blocks {
		if !x.lru.Contains(h) {
			return i
		}
	}
	return len(blocks)
}

// add records blocks as sent to the pod, most recent last.
func (x *index) add(blocks []uint64) {
	for _, h := range blocks {
		x.lru.Add(h, struct{}{})
	}
}
