package queue

import "strconv"

// Order is the order in which waiters of one priority leave the queue.
type Order int

const (
	// FIFO serves waiters by arrival. It is the zero value.
	FIFO Order = iota
	// ShortestFirst serves the fewest estimated tokens first (ties by
	// arrival), except that a waiter older than StarvationAfter goes ahead of
	// every younger one (oldest first).
	ShortestFirst
	// EarliestDeadline serves the earliest Request.Deadline first (ties by
	// arrival); waiters without a deadline go after every waiter with one,
	// by arrival. It needs no aging: a waiter's deadline comes closer as it
	// waits, and the caller refuses it once it has passed.
	EarliestDeadline
)

// String returns "fifo", "shortest_first", "earliest_deadline" or "Order(n)".
func (o Order) String() string {
	switch o {
	case FIFO:
		return "fifo"
	case ShortestFirst:
		return "shortest_first"
	case EarliestDeadline:
		return "earliest_deadline"
	default:
		return "Order(" + strconv.Itoa(int(o)) + ")"
	}
}
