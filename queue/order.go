package queue

import "strconv"

// Order is the order in which waiters leave the queue.
type Order int

const (
	// FIFO serves waiters by arrival. It is the zero value.
	FIFO Order = iota
	// ShortestFirst serves the fewest estimated tokens first (ties by
	// arrival), except that a waiter older than StarvationAfter goes ahead of
	// every younger one (oldest first).
	ShortestFirst
)

// String returns "fifo", "shortest_first" or "Order(n)".
func (o Order) String() string {
	switch o {
	case FIFO:
		return "fifo"
	case ShortestFirst:
		return "shortest_first"
	default:
		return "Order(" + strconv.Itoa(int(o)) + ")"
	}
}
