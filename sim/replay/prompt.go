package replay

import (
	"encoding/binary"

	"github.com/gatekeeper-dev/gatekeeper/internal/route"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// Segment is a run of a prompt's tokens with one identity: a system prompt,
// one user message, one answer. A prompt given as segments (Arrival.Content)
// is the text they stand for, in order; two prompts that begin with the same
// segments begin with the same text, and share nothing after the first
// segment that differs.
//
// From the segments both sides derive what they would from the real text,
// each its own way: the engine the KV block hashes of vLLM's prefix cache
// (kvBlocks: the tokens' ids, block by block of the engine's block size,
// chained with sim.ChainHash), gatekeeper the prefix blocks of its router
// (routeBlocks: the prompt's characters, route.Blocks' 64-character blocks,
// chained with xxhash). Token j of a segment has an id drawn from the
// segment's ID and j, and is written as a word of 1 to 7 characters (4 on
// average, the characters per token both sides assume), so the gateway's
// block boundaries fall near, not on, the engine's, as they do over a real
// tokenizer. Two prompts that share T leading tokens share ⌊T ÷ block size⌋
// KV blocks and about ⌊4T ÷ 64⌋ of the router's blocks (up to
// route.MaxBlocks, 2 048 tokens or so), give or take one.
type Segment struct {
	// ID is the segment's content: equal IDs are equal text.
	ID uint64
	// Tokens is its length.
	Tokens int
}

// Content is a prompt's segments, in order.
type Content struct {
	Segments []Segment
}

// segments are c's segments; none for nil.
func (c *Content) segments() []Segment {
	if c == nil {
		return nil
	}
	return c.Segments
}

// tokenID is the id of token j of segment seg (a SplitMix64 step).
func tokenID(seg uint64, j int) uint32 {
	z := seg + uint64(j+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return uint32((z ^ z>>31) >> 16)
}

// kvBlockHashes are the engine's block hashes of a prompt of segs: its
// full blocks of blockSize tokens, each token 4 bytes (its id), chained.
func kvBlockHashes(segs []Segment, blockSize int) []uint64 {
	if len(segs) == 0 || blockSize <= 0 {
		return nil
	}
	var hs []uint64
	var parent uint64
	buf := make([]byte, 0, 4*blockSize)
	for _, sg := range segs {
		for j := range sg.Tokens {
			buf = binary.LittleEndian.AppendUint32(buf, tokenID(sg.ID, j))
			if len(buf) == cap(buf) {
				parent = sim.ChainHash(parent, buf)
				hs = append(hs, parent)
				buf = buf[:0]
			}
		}
	}
	return hs
}

// promptText is the leading text of a prompt of segs as gatekeeper reads
// it, as far as route.Blocks looks (route.MaxBlocks × route.BlockChars).
func promptText(segs []Segment) []byte {
	const most = route.MaxBlocks * route.BlockChars
	text := make([]byte, 0, most)
	for _, sg := range segs {
		for j := 0; j < sg.Tokens && len(text) < most; j++ {
			id := tokenID(sg.ID, j)
			for k := range 1 + id%7 {
				text = append(text, 'a'+byte((id>>(3*k))%26))
			}
		}
	}
	return text
}

// kvBlocks are the call's KV block hashes for an engine of that block
// size (computed once; nil for a prompt without segments).
func (c *call) kvBlocks(blockSize int) []uint64 {
	segs := c.a.Content.segments()
	if len(segs) == 0 {
		return nil
	}
	if c.kv == nil || c.kvSize != blockSize {
		c.kv, c.kvSize = kvBlockHashes(segs, blockSize), blockSize
	}
	return c.kv
}

// routeBlocks are the call's prefix blocks as gatekeeper hashes them
// (computed once; nil for a prompt without segments).
func (c *call) routeBlocks(model string) []uint64 {
	segs := c.a.Content.segments()
	if len(segs) == 0 {
		return nil
	}
	if c.route == nil {
		c.route = route.Blocks(nil, model, promptText(segs))
	}
	return c.route
}

// model is the served model's name, which seeds the router's hashes.
func (s Settings) model() string {
	if s.Engine.Model.Name != "" {
		return s.Engine.Model.Name
	}
	m, _ := sim.ModelByName("")
	return m.Name
}
