package decide

import "github.com/gatekeeper-dev/gatekeeper/internal/queue"

// Ranker is what an Admission may also do: rank the upstreams other than
// chosen that could take r now, best first, at most n of them, appended to
// dst (queue.Queue.Ranked; Queue's Admission has it). It takes nothing.
type Ranker interface {
	Ranked(dst []queue.Candidate, r queue.Request, chosen string, n int) []queue.Candidate
}

// Ranked appends to dst, best first, at most n pods besides adm's that
// could take req now: available, with room and bounds that fit req, not
// among those req may not use (Request.Skip: its model, the gateway's
// subset), each with its score for req and its prefix blocks (queue.Core.Ranked). They are the
// endpoint picker's fallbacks: they hold no slot, and a request Envoy
// sends to one counts against adm's slot. Nothing is ranked (dst is
// returned as it is) when the Admission is not a Ranker.
func (c *Core) Ranked(dst []queue.Candidate, req *Request, adm *Admitted, n int) []queue.Candidate {
	r, ok := c.admission.(Ranker)
	if !ok || adm == nil || n <= 0 {
		return dst
	}
	q := queue.Request{Seqs: req.Seqs, Tokens: req.Tokens, Memory: req.Memory, Exclude: req.Skip, Prefix: req.Prefix}
	return r.Ranked(dst, q, adm.Slot.Upstream(), n)
}

// Ranked ranks the queue's windows (Ranker).
func (a queueAdmission) Ranked(dst []queue.Candidate, r queue.Request, chosen string, n int) []queue.Candidate {
	return a.q.Ranked(dst, r, chosen, n)
}
