package decide

import (
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
// text lives on the stack; the blocks are the one allocation, kept by the
// queue while the request waits.
func (c *Core) prefix(req *Request, body []byte) {
	if !req.Policy.Prefix || c.reg.Len()-len(req.Skip) < 2 {
		return
	}
	var buf [prefixBytes + 8]byte // + a decoded character or a token id past the limit
	text := classify.PromptText(req.Kind, body, buf[:0], prefixBytes)
	if n := min(len(text)/route.BlockChars, route.MaxBlocks); n > 0 {
		req.Prefix = route.Blocks(make([]uint64, 0, n), req.Model, text)
	}
}
