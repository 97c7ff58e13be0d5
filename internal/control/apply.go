package control

import "github.com/gatekeeper-dev/gatekeeper/internal/queue"

// Windows is what a Decision is applied to: the admission queue's windows.
// *queue.Queue (gatekeeper) and *queue.Core (the replay, on its virtual
// clock) both satisfy it, and cmd/gatekeeper's cluster bounds wrap the
// queue to scale each value to this replica's share.
type Windows interface {
	SetWindow(name string, limit int)
	SetMemoryBudget(name string, budget int64)
	SetTokenLimit(name string, limit int64)
	SetWindowOrder(name string, o queue.Order)
}

var (
	_ Windows = (*queue.Queue)(nil)
	_ Windows = (*queue.Core)(nil)
)

// Apply applies one round's decision to w, exactly once per round. While
// enforcing, a changed window is resized and each pool's order set; the
// memory budget and token limit are set every round, not only on change,
// so that observe mode (which bounds nothing: both 0, windows untouched)
// and a reload back to enforcing both end with what the decision says.
// The caller dispatches afterwards: a pod that left critical, or a window
// that grew, takes its waiters then.
func (d Decision) Apply(w Windows, enforce bool) {
	for _, ch := range d.Upstreams {
		if ch.LimitChanged && enforce {
			w.SetWindow(ch.Name, ch.Limit)
		}
		budget, tokens := ch.MemoryBudget, ch.TokenLimit
		if !enforce {
			budget, tokens = 0, 0
		}
		w.SetMemoryBudget(ch.Name, budget)
		w.SetTokenLimit(ch.Name, tokens)
		if enforce {
			w.SetWindowOrder(ch.Name, ch.Order)
		}
	}
}
