// Package route scores the pods a request may go to: gatekeeper's pod
// choice when a pool has more than one pod, for both fronts (the queue asks
// it at every grant, through queue.Scorer).
//
// Four scorers, each a value in [0, 1], are combined by the policy's weights
// (routing.scorers):
//
//   - prefix: the share of the request's leading prompt blocks that the pod
//     probably still holds in its KV cache. Without a tokenizer: the prompt
//     is cut into blocks of BlockChars characters, each block's hash chained
//     to the one before (as vLLM chains its KV block hashes), and every pod
//     keeps a bounded LRU of the block hashes of the requests sent to it
//     (as llm-d's approximate prefix scorer does). A pod matches the leading
//     blocks found in its LRU, up to the first miss.
//   - load: the free part of the pod's window, less what the pod itself
//     queues (vLLM's num_requests_waiting).
//   - kv: the free part of the pod's KV cache (vLLM's kv_cache_usage).
//   - memory: the pod's GPU memory headroom: 1 with free memory and a
//     fragmentation ratio of 1, falling to 0 as the ratio reaches the
//     shed threshold or the free memory nears what its requests need.
//
// A pod the slow breaker refuses (critical, paused, down) is never scored:
// the queue only offers windows that are available and have room.
//
// # The approximation and its error
//
// A block of 64 characters is about 16 tokens (vLLM's default block size)
// at 4 characters per token, but its boundaries are not the tokenizer's,
// and the chat template vLLM applies adds tokens the text does not show. The
// hashes therefore name prefixes, not vLLM's blocks: two prompts that share
// their first k blocks of characters share about k × 16 tokens of prefix,
// give or take one block. The LRU remembers what was sent, not what the pod
// still holds: vLLM evicts cached blocks when its KV cache fills, so under
// memory pressure the scorer overestimates the hit (the kv scorer then
// counts against that pod), and a pod that restarted is believed warm
// until its entries age out (Forget clears a pod that was removed or
// restarted). See docs/routing.md.
package route
