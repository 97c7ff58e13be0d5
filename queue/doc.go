// Package queue is gatekeeper's admission queue: one bounded queue of
// requests in front of the batch windows of every upstream.
//
// Each upstream is a window: the most requests gatekeeper lets it run at
// once (limit) and how many it runs now (in-flight). A request takes a slot
// on the available window with the most free room, or waits. Waiters leave
// in FIFO order, or shortest-estimated-first with aging (a waiter older than
// StarvationAfter goes first regardless of size). A waiter never overtakes an
// earlier one, unless the earlier one cannot use that window (it excludes
// it). The queue is bounded in length and in estimated tokens.
//
// The package has two layers over the same logic:
//
//   - [Core] is pure: no goroutines, channels or timers, not safe for
//     concurrent use, and every method that depends on time takes now. The
//     simulator's replay drives it on a virtual clock.
//   - [Queue] wraps a Core with a mutex and one buffered channel per waiter
//     for the proxy: [Queue.Acquire] blocks until a slot is granted or the
//     caller's context ends. Deadlines come from that context; the queue
//     owns no timer.
//
// The package knows nothing of HTTP and does not log: it reports through
// return values, sentinel errors and [Stats] snapshots.
package queue
