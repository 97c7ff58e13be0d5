package sim

import (
	"encoding/binary"
	"hash/fnv"
)

// ChainHash is a full KV block's identity for automatic prefix caching:
// the hash of its parent block's hash (0 for the first block) and the
// block's content (its token ids, or any bytes that stand for them), as
// vLLM's hash_block_tokens chains them (vllm/v1/core/kv_cache_utils.py). Two
// prompts share a block only when every block before it is the same too.
// FNV-1a, 64 bits: deterministic across runs, unlike Python's hash.
func ChainHash(parent uint64, block []byte) uint64 {
	h := fnv.New64a()
	var p [8]byte
	binary.LittleEndian.PutUint64(p[:], parent)
	_, _ = h.Write(p[:])
	_, _ = h.Write(block)
	return h.Sum64()
}

// PrefixCacheStats are vLLM's prefix-cache counters of the current engine
// process, in tokens: Queries is vllm:prefix_cache_queries (the prompt
// tokens of every request looked up when it is first scheduled), Hits is
// vllm:prefix_cache_hits (the tokens found cached). They start again from
// zero after a restart, like vLLM's. (They are not in Metrics so that a
// Metrics snapshot reads as it did before prefix caching.)
type PrefixCacheStats struct {
	Queries, Hits int64
}

// PrefixCache returns the prefix cache's counters.
func (e *Engine) PrefixCache() PrefixCacheStats { return e.pc.stats }

// cachedBlock is a full KV block with a hash. ref counts the running
// requests that hold it; at ref 0 it sits in the free queue, still
// cached, until a new block is needed and it is the least recently freed.
type cachedBlock struct {
	hash       uint64
	ref        int
	prev, next *cachedBlock // free queue links, at ref 0
}

// prefixCache is vLLM V1's BlockPool as far as cached blocks go: a map from
// block hash to block (cached_block_hash_to_block) and the free queue's
// cached part, least recently freed first (FreeKVCacheBlockQueue). The
// engine's freeBlocks counts every block no request holds, the cached free
// ones included (vLLM's get_num_free_blocks); free − lru.n are free blocks
// without a hash, which new blocks take first.
type prefixCache struct {
	blocks map[uint64]*cachedBlock
	head   cachedBlock // sentinel: head.next is the least recently freed
	n      int         // cached blocks in the free queue
	stats  PrefixCacheStats
}

func (pc *prefixCache) reset() {
	*pc = prefixCache{}
	pc.head.next, pc.head.prev = &pc.head, &pc.head
}

// pushFree appends a block freed now at the queue's most recent end.
func (pc *prefixCache) pushFree(b *cachedBlock) {
	last := pc.head.prev
	b.prev, b.next = last, &pc.head
	last.next = b
	pc.head.prev = b
	pc.n++
}

func (pc *prefixCache) unlink(b *cachedBlock) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
	pc.n--
}

// lookup returns how many leading blocks of hashes are cached, at most max,
// and how many of those no request holds (they leave the free queue when
// taken).
func (pc *prefixCache) lookup(hashes []uint64, limit int) (hit, free int) {
	for _, h := range hashes[:min(len(hashes), limit)] {
		b := pc.blocks[h]
		if b == nil {
			break
		}
		hit++
		if b.ref == 0 {
			free++
		}
	}
	return hit, free
}

// hitBlocks is how many leading blocks of s's prompt the cache can give it
// now and how many of those are free: at most (tokens − 1) ÷ block size,
// since vLLM always computes the last token (max_cache_hit_length), and none
// for a request with prompt_logprobs (vLLM skips the lookup:
// skip_reading_prefix_cache).
func (e *Engine) hitBlocks(s *Seq) (hit, free int) {
	if len(s.req.BlockHashes) == 0 || s.req.PromptLogprobs {
		return 0, 0
	}
	return e.pc.lookup(s.req.BlockHashes, (s.req.PromptTokens+s.generated-1)/e.s.BlockSize)
}

// takeHits gives s its first hit cached blocks (refcount up, out of the free
// queue) and counts the lookup; a preempted request's lookup goes to vLLM's
// preempted_queries/_hits (PrefixCacheStats.record), which the two
// counters leave out.
func (e *Engine) takeHits(s *Seq, hit int) {
	if len(s.req.BlockHashes) == 0 || s.req.PromptLogprobs {
		return
	}
	if s.preempted == 0 {
		e.pc.stats.Queries += int64(s.req.PromptTokens)
		e.pc.stats.Hits += int64(hit * e.s.BlockSize)
	}
	for _, h := range s.req.BlockHashes[:hit] {
		b := e.pc.blocks[h]
		if b.ref == 0 {
			e.pc.unlink(b)
			e.freeBlocks--
		}
		b.ref++
	}
	s.cached = hit
	s.blocks = hit
	s.computed = hit * e.s.BlockSize
}

// takeBlocks takes n new blocks from the free queue: free blocks without a
// hash first, then cached ones, least recently freed first, whose hashes are
// evicted (BlockPool.get_new_blocks, _maybe_evict_cached_block).
func (e *Engine) takeBlocks(n int) {
	evict := n - (e.freeBlocks - e.pc.n)
	e.freeBlocks -= n
	for ; evict > 0; evict-- {
		b := e.pc.head.next
		e.pc.unlink(b)
		delete(e.pc.blocks, b.hash)
	}
}

// cacheFull makes s's newly computed full prompt blocks cached blocks
// (BlockPool.cache_full_blocks). A block whose hash another request cached
// meanwhile is shared: s takes a ref on that one and frees its own copy.
func (e *Engine) cacheFull(s *Seq) {
	full := min(s.computed/e.s.BlockSize, len(s.req.BlockHashes))
	for ; s.cached < full; s.cached++ {
		h := s.req.BlockHashes[s.cached]
		if b := e.pc.blocks[h]; b != nil {
			if b.ref == 0 {
				e.pc.unlink(b)
				e.freeBlocks--
			}
			b.ref++
			e.freeBlocks++ // s's own copy goes back without a hash
			continue
		}
		if e.pc.blocks == nil {
			e.pc.blocks = make(map[uint64]*cachedBlock)
		}
		e.pc.blocks[h] = &cachedBlock{hash: h, ref: 1}
	}
}

// releaseCached drops s's refs on its cached blocks, last block first, so
// that a request's tail is evicted before its head (vLLM frees a request's
// blocks in reverse order). A block nobody holds stays cached, free.
func (e *Engine) releaseCached(s *Seq) {
	for i := s.cached - 1; i >= 0; i-- {
		b := e.pc.blocks[s.req.BlockHashes[i]]
		if b.ref--; b.ref == 0 {
			e.pc.pushFree(b)
			e.freeBlocks++
		}
	}
	s.cached = 0
}
