package decide

import (
	"sync"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// prefixBytes is the most prompt text hashed into prefix blocks.
const prefixBytes = route.MaxBlocks * route.BlockChars

// prefix sets req.Prefix, the hashes of its prompt's leading blocks
// (route.Blocks over classify.PromptText, seeded by its model), when the
// policy asks for them (Policy.Prefix) and the request may go to more than
// one pod: with one there is nothing to choose, so a deployment of one pod
// never computes them. The pool is counted as the registry's pods less
// those req skips (Route and the subset hint add each at most once). The
// text goes in a pooled buffer (prefixBuffers); the blocks are the one
// allocation, kept by the queue while the request waits.
func (c *Core) prefix(req *Request, body []byte) {
	if !req.Policy.Prefix || c.reg.Len()-len(req.Skip) < 2 {
		return
	}
	buf := prefixBuffers.Get().(*prefixBuffer)
	text := classify.PromptText(req.Kind, body, buf[:0], prefixBytes)
	if n := min(len(text)/route.BlockChars, route.MaxBlocks); n > 0 {
		req.Prefix = route.Blocks(make([]uint64, 0, n), req.Model, text)
	}
	prefixBuffers.Put(buf)
}

// prefixBuffer holds the prompt text prefix hashes: prefixBytes, and a
// decoded character or a token id past the limit.
type prefixBuffer [prefixBytes + 8]byte

// prefixBuffers pools prefix's text buffers. They are kept off the goroutine
// stack on purpose: as a local, the buffer made prefix's frame larger than
// 8 KiB, which Go checks at the function's entry whether it hashes or not, so
// every request's goroutine (the proxy's connection goroutine, the picker's
// stream goroutine) grew its stack to 16 KiB by copying it, and a proxied
// stream kept that size for its life (bench/README.md, "The handler's
// stack and heap per stream").
var prefixBuffers = sync.Pool{New: func() any { return new(prefixBuffer) }}
