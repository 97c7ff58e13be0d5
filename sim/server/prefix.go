package server

import (
	"encoding/binary"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// The simulator has no tokenizer, so a prompt's KV blocks are identified by
// its text: a prompt is rendered as a byte string of unit bytes per token
// (CharsPerToken characters of text, the same estimate that counts its
// tokens; 4 bytes per id for token-id prompts; a chat message's 4 template
// tokens are its role, padded to 4 tokens' width), cut into chunks of
// block size × unit bytes, and each full chunk hashed with its parent's hash
// (sim.ChainHash), at most prompt tokens ÷ block size of them. Two prompts
// with the same leading text share the blocks of that text, as two vLLM
// prompts with the same leading tokens do. The error is the tokenizer's: a
// real BPE token averages about 4 characters of English but varies, so a
// chunk boundary here falls near, not on, vLLM's block boundary; two
// prompts that differ inside a chunk share none of it, so hits are counted
// to the chunk below the first difference, and a difference that a
// tokenizer would merge into a token before the boundary is not seen.

// blockHashes returns the chained hashes of content's full blocks.
func blockHashes(content []byte, unit, blockSize, promptTokens int) []uint64 {
	chunk := unit * blockSize
	n := min(len(content)/chunk, promptTokens/blockSize)
	if n == 0 {
		return nil
	}
	hs := make([]uint64, n)
	var parent uint64
	for i := range hs {
		parent = sim.ChainHash(parent, content[i*chunk:(i+1)*chunk])
		hs[i] = parent
	}
	return hs
}

// appendRole appends a chat message's template tokens: its role, padded
// with zero bytes (or cut) to width bytes.
func appendRole(b []byte, role string, width int) []byte {
	start := len(b)
	b = append(b, role...)
	b = b[:min(len(b), start+width)]
	for len(b) < start+width {
		b = append(b, 0)
	}
	return b
}

// appendIDs appends token ids, 4 bytes each.
func appendIDs(b []byte, ids []int) []byte {
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	return b
}
