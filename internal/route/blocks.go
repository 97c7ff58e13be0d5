package route

import "github.com/cespare/xxhash/v2"

// BlockChars is the characters per prefix block: about vLLM's 16-token KV
// block at 4 characters per token.
const BlockChars = 64

// MaxBlocks bounds the blocks hashed per request (8,192 characters, about
// 2,048 tokens): a prefix longer than that is shared or not by its start.
const MaxBlocks = 128

// Blocks appends to dst the chained hashes of the whole blocks of BlockChars
// bytes at text's start, at most MaxBlocks, and returns it. The first hash
// is seeded by model, so that two models never share a prefix; each next
// hash covers its block and every block before it. A trailing part block is
// not hashed (vLLM caches only full blocks).
func Blocks(dst []uint64, model string, text []byte) []uint64 {
	parent := xxhash.Sum64String(model)
	var buf [8 + BlockChars]byte
	for i := 0; i+BlockChars <= len(text) && len(dst) < MaxBlocks; i += BlockChars {
		putUint64(buf[:8], parent)
		copy(buf[8:], text[i:i+BlockChars])
		parent = xxhash.Sum64(buf[:])
		dst = append(dst, parent)
	}
	return dst
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}
