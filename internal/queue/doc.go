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
// # Fair shares between tenants
//
// Within a priority the queue shares between tenants (Request.Tenant) by a
// Virtual Token Counter (VTC: Sheng et al., "Fairness in Serving Large
// Language Models", OSDI 2024). Each tenant of each priority has a counter
// of the service it was granted, in the caller's weighted tokens
// (Request.Service) divided by its weight. A dispatch serves, in the
// highest priority waiting, the backlogged tenant with the least counter
// (ties: the one whose oldest waiter arrived first), and inside that tenant
// the order above, unchanged; the grant adds its Service ÷ weight to the
// counter, and Settle later corrects it by the real service (the charge is
// an estimate: the output is not known yet). A tenant that had no waiter
// is lifted as its request arrives, to at least the least counter of the
// tenants backlogged in its priority (with none, that of the tenant
// granted last there), so an idle tenant cannot bank credit to burst with
// later. A priority above still always goes first, and a tenant whose
// waiters cannot use a window with room holds no other tenant back.
//
// The bound: while two tenants f and g are both backlogged in one
// priority, and every grant there could go to either, the service each
// receives divided by its weight differs by at most 2 × U, where U is the
// largest Service ÷ weight of a single request. The tenant granted always
// has the least counter and gains at most U, and the lift puts a newly
// backlogged tenant within U of the others, so the two counters are within
// U of each other when the interval starts and whenever it is measured.
// With estimates the bound widens by the Settle corrections, which move a
// counter without a grant: those made to either tenant meanwhile, and
// those that moved one since the other's last grant. sim/replay's issue 26
// measures it on a saturated pod (README.md there). Waiters passed over
// (they exclude the windows with room, or do not fit them) are outside the
// bound too: the room goes to whoever can use it.
//
// # Shares of each window
//
// Settings.Shares bounds a tenant's part of every window (by tenant name,
// whatever the priority), as fractions of the window's current limit in
// slots: Max caps it at ceil(Max × limit), so a tenant at its cap waits
// with room left, and Min keeps floor(Min × limit) slots that no other
// tenant is granted while it holds fewer, even while it is idle.
// Settings.DefaultMaxShare caps every tenant not listed. A dispatch sets
// aside, whole, a tenant whose next waiter only its share keeps out
// (O(log tenants)), and the tenants after it go; the shares are checked in
// O(1) for the cap and O(tenants with a Min) for the reservations. Grants
// within a share still go by the counters, so the bound above holds
// between tenants that no share keeps out.
//
// Cost: groups are keyed by Exclude list and tenant, so each tenant keeps
// its waiters in its own groups; each priority keeps a heap of its
// backlogged tenants by counter (ties by the oldest of a tenant's groups'
// heads). Finding the next waiter is a look at the highest priority
// waiting, its least-counter tenant, and that tenant's groups' heads:
// O(groups of one tenant), where scanning every group would grow with the
// tenants. A grant or an arrival re-places its tenant, O(log tenants ×
// groups of a tenant). With one tenant that is the cost without tenants,
// plus a few comparisons. Once more tenants than
// Settings.MaxTenants are remembered, the idle ones (no waiter, nothing in
// flight) also sit in a heap by counter, and the least is forgotten as
// soon as they are too many: O(log tenants) per change, never a scan.
//
// The package has two layers over the same logic:
//
//   - [Core] is pure: no goroutines, channels or timers, not safe for
//     concurrent use, and every method that depends on time takes now. The
//     simulator's replay drives it on a virtual clock.
//   - [Queue] wraps a Core with a mutex and one buffered channel per waiter
//     for the proxy: [Queue.Acquire] blocks until a slot is granted or the
//     caller's context ends. Deadlines come from that context; the queue
//     owns no timer. [Queue.Enter] and [Waiter.Wait] are Acquire in two
//     steps, so that a caller makes its deadline's context only for a
//     request that waits.
//
// The package knows nothing of HTTP and does not log: it reports through
// return values, sentinel errors and [Stats] snapshots.
package queue
