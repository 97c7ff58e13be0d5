package sim

import (
	"fmt"
	"testing"
	"time"
)

// chain returns the chained hashes of n blocks whose contents are named
// name/0, name/1, …; blocks of two chains match while their names do.
func chain(names ...string) []uint64 {
	var hs []uint64
	var parent uint64
	for i, n := range names {
		parent = ChainHash(parent, fmt.Appendf(nil, "%s/%d", n, i))
		hs = append(hs, parent)
	}
	return hs
}

// runDone advances e in 5 ms steps until every seq has ended.
func runDone(t *testing.T, e *Engine, seqs ...*Seq) {
	t.Helper()
	for range 100_000 {
		done := true
		for _, s := range seqs {
			done = done && s.Done()
		}
		if done {
			return
		}
		e.Advance(e.Now() + 5*time.Millisecond)
	}
	t.Fatal("requests did not end")
}

// checkBlocks holds the block accounting: free blocks are the total less
// every request's private blocks and the cached blocks someone holds; a
// cached block's refcount is the number of requests holding it; the free
// queue holds exactly the cached blocks nobody holds.
func checkBlocks(t *testing.T, e *Engine) {
	t.Helper()
	refs := map[uint64]int{}
	used := 0
	for _, s := range e.running {
		used += s.blocks - s.cached
		for _, h := range s.req.BlockHashes[:s.cached] {
			refs[h]++
		}
	}
	queued := 0
	for b := e.pc.head.next; b != &e.pc.head; b = b.next {
		queued++
		if b.ref != 0 {
			t.Fatalf("block %x in the free queue with ref %d", b.hash, b.ref)
		}
	}
	for h, b := range e.pc.blocks {
		if b.ref != refs[h] {
			t.Fatalf("block %x ref = %d, want %d", h, b.ref, refs[h])
		}
		if b.ref > 0 {
			used++
		}
	}
	if queued != e.pc.n || e.freeBlocks != e.plan.NumGPUBlocks-used {
		t.Fatalf("free queue %d (n %d), free blocks %d, want %d", queued, e.pc.n, e.freeBlocks, e.plan.NumGPUBlocks-used)
	}
}

// hits runs one request to its end and returns the tokens it found cached.
func hits(t *testing.T, e *Engine, r Request) int64 {
	t.Helper()
	before := e.PrefixCache().Hits
	s, err := e.Submit(r)
	if err != nil {
		t.Fatal(err)
	}
	runDone(t, e, s)
	checkBlocks(t, e)
	return e.PrefixCache().Hits - before
}

func TestPrefixCacheHits(t *testing.T) {
	tests := []struct {
		name  string
		first Request
		then  Request
		want  int64 // tokens the second request finds cached
	}{
		{"shared leading blocks only", Request{PromptTokens: 69, BlockHashes: chain("s", "s", "a", "a")},
			Request{PromptTokens: 69, BlockHashes: chain("s", "s", "b", "b")}, 32},
		{"a differing first block breaks the chain", Request{PromptTokens: 64, BlockHashes: chain("a", "s", "s", "s")},
			Request{PromptTokens: 64, BlockHashes: chain("b", "s", "s", "s")}, 0},
		{"the partial last block is not shared", Request{PromptTokens: 69, BlockHashes: chain("s", "s", "s", "s")},
			Request{PromptTokens: 70, BlockHashes: chain("s", "s", "s", "s")}, 64},
		{"a fully cached prompt recomputes its last block", Request{PromptTokens: 64, BlockHashes: chain("s", "s", "s", "s")},
			Request{PromptTokens: 64, BlockHashes: chain("s", "s", "s", "s")}, 48},
		{"prompt_logprobs skips the lookup", Request{PromptTokens: 64, BlockHashes: chain("s", "s", "s", "s")},
			Request{PromptTokens: 64, BlockHashes: chain("s", "s", "s", "s"), PromptLogprobs: true}, 0},
		{"no identity, no hit", Request{PromptTokens: 64}, Request{PromptTokens: 64}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, Settings{NumGPUBlocksOverride: 100})
			tt.first.MaxTokens, tt.then.MaxTokens = 4, 4
			if got := hits(t, e, tt.first); got != 0 {
				t.Fatalf("first request hits = %d, want 0", got)
			}
			if got := hits(t, e, tt.then); got != tt.want {
				t.Fatalf("second request hits = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestPrefixCacheEvictsLeastRecentlyFreed fills a 10-block cache so that
// two cached blocks must go: the least recently freed ones (B's, since A
// ran again after B), not A's.
func TestPrefixCacheEvictsLeastRecentlyFreed(t *testing.T) {
	e := newEngine(t, Settings{NumGPUBlocksOverride: 10})
	a := Request{PromptTokens: 33, MaxTokens: 1, BlockHashes: chain("a", "a")}
	b := Request{PromptTokens: 33, MaxTokens: 1, BlockHashes: chain("b", "b")}
	steps := []struct {
		r    Request
		want int64
	}{
		{a, 0}, {b, 0}, {a, 32}, // free queue, oldest first: b1 b0 a1 a0
		{Request{PromptTokens: 128, MaxTokens: 1}, 0}, // 8 blocks: 6 without a hash, then b1 and b0 evicted
		{b, 0}, {a, 32},
	}
	for i, st := range steps {
		if got := hits(t, e, st.r); got != st.want {
			t.Fatalf("step %d: hits = %d, want %d", i, got, st.want)
		}
	}
}

// TestPrefixCacheSharedBlocksCountOnce runs two requests with the same
// prompt side by side: the shared blocks are held once with refcount 2, an
// abort of one leaves them held by the other, and when both end they stay
// cached in the free queue.
func TestPrefixCacheSharedBlocksCountOnce(t *testing.T) {
	e := newEngine(t, Settings{NumGPUBlocksOverride: 100})
	r := Request{PromptTokens: 65, MaxTokens: 100, BlockHashes: chain("s", "s", "s", "s")}
	a, _ := e.Submit(r)
	for a.Generated() == 0 {
		e.Advance(e.Now() + time.Millisecond)
	}
	b, _ := e.Submit(r)
	for b.Generated() == 0 {
		e.Advance(e.Now() + time.Millisecond)
	}
	checkBlocks(t, e)
	if got, want := e.plan.NumGPUBlocks-e.freeBlocks, a.blocks+b.blocks-4; got != want || e.PrefixCache().Hits != 64 {
		t.Fatalf("used blocks = %d, want %d (hits %d)", got, want, e.PrefixCache().Hits)
	}
	for _, h := range r.BlockHashes {
		if ref := e.pc.blocks[h].ref; ref != 2 {
			t.Fatalf("ref = %d, want 2", ref)
		}
	}
	e.Abort(a)
	checkBlocks(t, e)
	if got := e.plan.NumGPUBlocks - e.freeBlocks; got != b.blocks {
		t.Fatalf("after aborting a: used blocks = %d, want b's %d", got, b.blocks)
	}
	e.Abort(b)
	checkBlocks(t, e)
	if e.freeBlocks != e.plan.NumGPUBlocks || e.pc.n != 4 || e.Metrics().KVCacheUsage != 0 {
		t.Fatalf("after both: free %d of %d, %d cached free", e.freeBlocks, e.plan.NumGPUBlocks, e.pc.n)
	}
}

// TestPrefixCacheShortensPrefill: a 4 000-token prompt whose first 3 984
// tokens are cached prefills only the last 16, so its first token comes in
// a decode-sized step instead of a 4 000-token prefill.
func TestPrefixCacheShortensPrefill(t *testing.T) {
	names := make([]string, 250)
	for i := range names {
		names[i] = "sys"
	}
	r := Request{PromptTokens: 4000, MaxTokens: 1, BlockHashes: chain(names...)}
	ttft := func(e *Engine) time.Duration {
		s, _ := e.Submit(r)
		runDone(t, e, s)
		return s.FirstTokenAt() - s.Arrival()
	}
	e := newEngine(t, Settings{})
	cold := ttft(e)
	warm := ttft(e)
	if q := e.PrefixCache(); q.Queries != 8000 || q.Hits != 3984 {
		t.Fatalf("PrefixCache() = %+v, want 8000 queries, 3984 hits", q)
	}
	if warm*10 > cold {
		t.Fatalf("time to first token cold %v, warm %v: want warm under a tenth", cold, warm)
	}
}

// TestPrefixCacheRestartsEmpty: an OOM's restart is a new process, whose
// prefix cache and counters start empty.
func TestPrefixCacheRestartsEmpty(t *testing.T) {
	e := newEngine(t, Settings{NumGPUBlocksOverride: 100})
	r := Request{PromptTokens: 64, MaxTokens: 1, BlockHashes: chain("s", "s", "s", "s")}
	hits(t, e, r)
	hits(t, e, r)
	if e.PrefixCache().Hits != 48 {
		t.Fatalf("hits = %d, want 48", e.PrefixCache().Hits)
	}
	if err := e.boot(); err != nil {
		t.Fatal(err)
	}
	if got := e.PrefixCache(); got != (PrefixCacheStats{}) || len(e.pc.blocks) != 0 || e.pc.n != 0 {
		t.Fatalf("after a restart: %+v, %d cached blocks", got, len(e.pc.blocks))
	}
	if got := hits(t, e, r); got != 0 {
		t.Fatalf("hits after a restart = %d, want 0", got)
	}
}

// TestPrefixCacheCountsPreemptedOnce: three requests that outgrow a
// 10-block cache are preempted and recomputed; each is counted once in
// the queries (vLLM counts a preempted request's lookup apart), and the
// block accounting holds throughout.
func TestPrefixCacheCountsPreemptedOnce(t *testing.T) {
	e := newEngine(t, Settings{NumGPUBlocksOverride: 10})
	var seqs []*Seq
	for _, n := range []string{"a", "b", "c"} {
		s, err := e.Submit(Request{PromptTokens: 40, MaxTokens: 40, BlockHashes: chain(n, n)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	runDone(t, e, seqs...)
	checkBlocks(t, e)
	if q := e.PrefixCache(); e.Metrics().Counters.Preemptions == 0 || q.Queries != 120 {
		t.Fatalf("preemptions %d, %+v: want some, and 120 queries", e.Metrics().Counters.Preemptions, q)
	}
}

func TestSubmitRefusesTooManyBlockHashes(t *testing.T) {
	e := newEngine(t, Settings{NumGPUBlocksOverride: 100})
	if _, err := e.Submit(Request{PromptTokens: 47, MaxTokens: 1, BlockHashes: chain("a", "a", "a")}); err == nil {
		t.Fatal("Submit(3 hashes for 47 tokens) = nil error")
	}
}
