package queue

import "time"

// Request is one request asking for a window slot.
type Request struct {
	// ID names the request in Core's grants and in Core.Cancel. It must be
	// unique among waiting requests. Queue assigns its own and ignores it.
	ID uint64
	// Tokens is the request's estimated tokens (prompt plus completion).
	// Negative counts as 0.
	Tokens int64
	// Exclude lists upstreams the request must not be sent to (one that
	// already failed it). The queue keeps the slice while the request waits;
	// do not modify it.
	Exclude []string
	// Prefix is the hashes of the request's leading prompt blocks
	// (route.Blocks): the Scorer's prefix affinity. The queue keeps the slice
	// while the request waits; do not modify it.
	Prefix []uint64
	// Memory is the request's estimated transient GPU memory, in the unit of
	// the windows' memory budgets (SetMemoryBudget): a window starts it only
	// while its in-flight requests' Memory plus this stays within the budget.
	// Negative counts as 0.
	Memory int64
	// Seqs is how many sequences the request runs on the pod (vLLM runs
	// prompts × max(n, best_of)): it takes that many slots of a window,
	// whose limit bounds the sequences in flight (vLLM's max_num_seqs
	// counts sequences, not requests). One above the whole limit still
	// runs alone. Below 1 counts as 1.
	Seqs int
	// Priority is the request's traffic class rank: a waiter of a higher
	// priority always leaves before one of a lower, whatever the order and
	// aging (which apply within a priority). 0 is the default.
	Priority int
	// Deadline, if set, is the latest time the request may start and still
	// be of use to its client (its time-to-first-token deadline). Enqueue
	// refuses it at once with a *DeadlineError (ErrDeadline) when the wait
	// predicted from the service rate of the windows it may use and the
	// slots of the waiters that go before it would pass Deadline; the
	// caller cancels a waiter whose Deadline passes while it waits. Under
	// EarliestDeadline it is also the order. Zero: none.
	Deadline time.Time
	// Tenant is who the request is for when the queue shares between tenants
	// within a priority ("" is a tenant like any other; with every request in
	// one tenant the queue orders as it would without tenants).
	Tenant string
	// Weight is Tenant's share (0 or less counts as 1): while two tenants are
	// backlogged, one of weight 2 receives twice the service of one of weight 1.
	// The tenant takes the weight of its latest request. NaN and infinities
	// count as 1 too, so that counters stay finite.
	Weight float64
	// Service is the request's estimated service in weighted tokens (the
	// caller's weights, for example prompt + 2 × output); charged to its
	// tenant's counter when it is granted. Negative counts as 0.
	Service int64
}

// Cost is what a running request holds on its window: its slots (Seqs) and
// its estimated tokens and memory (Request's fields; negative counts as 0,
// Seqs below 1 as 1).
//
// A Cost from a Grant also names the grant's tenant, whose requests in flight
// Release counts down: pass Grant.Cost back as it is.
type Cost struct {
	Tokens, Memory int64
	Seqs           int
	// tenant is the id of the grant's tenant (tenant.id), whose in-flight
	// count Release lowers: 4 bytes, so that the Cost every grant and slot
	// copies stays as small as before tenants. Its top bit is counted.
	tenant uint32
}

// cost is r's cost before it is granted (its tenant's id comes then).
func (r *Request) cost() Cost {
	return Cost{Tokens: max(r.Tokens, 0), Memory: max(r.Memory, 0), Seqs: max(r.Seqs, 1)}
}

func (it *item) cost() Cost {
	id := it.tenant.id
	if it.tenant.acct != nil {
		id |= counted
	}
	return Cost{Tokens: it.tokens, Memory: it.memory, Seqs: it.seqs, tenant: id}
}

// counted marks a Cost's tenant id whose slots the window's share
// accounts count (shares were on at its grant): only those are given back
// there, so turning shares on while requests run counts nothing twice.
const counted uint32 = 1 << 31

// slots is how many window slots c holds: Seqs, at least 1.
func (c Cost) slots() int { return max(c.Seqs, 1) }

// Grant says that request ID holds a slot on Upstream; its holder must give
// the slot back with Release exactly once. A Grant with Err set instead says
// the request left the queue refused (ErrUnavailable) and holds nothing.
type Grant struct {
	ID       uint64
	Upstream string
	// Cost is what the request holds on the window while it runs, which
	// its Release gives back.
	Cost Cost
	// Tenant and Priority name the counter that Service was charged to
	// (Request.Service, at least 0): Settle corrects it once the real
	// service is known.
	Tenant   string
	Priority int
	Service  int64
	// Score is the Scorer's score for the request on Upstream when it was
	// granted (before the Scorer was told of it); Scored says the queue had
	// a Scorer then (without one, Score is 0).
	Score  float64
	Scored bool
	Err    error
}
