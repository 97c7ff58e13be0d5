// Package cluster lets several gatekeeper replicas act as one: they share
// their token buckets and each pod's window through one Redis, and no pod
// runs more than its window however Redis fails (docs/cluster.md gives the
// worst case of each fault).
//
// A Cluster is one replica's handle on the shared state. Create one with
// New, declare the pods with SetPods and run its loop with Run.
//
// # Windows: capacity leases
//
// Each replica holds a lease on a share of each pod's window, in slots of
// the pod's largest window (its base: max_inflight). Run's heartbeat renews
// every lease in one atomic Redis call, with this replica's demand (what it
// runs and queues, Settings.Demand), and Redis grants each replica a
// max-min fair part of what the others do not reserve, the slack split
// evenly, so that the leases on a pod never reserve more than its base.
// Admission then decides locally: Scale maps the slow breaker's window,
// memory budget and token limit onto this replica's part (times cap/base),
// and the queue enforces them. No Redis call is on the request path for
// windows. A replica whose demand is above its share while Redis says more
// may come renews before the heartbeat is due, at most four times a
// heartbeat interval; so does one whose share shrank, so that Redis learns
// the slots are free.
//
// Windows keeps each pod's bounds as the slow breaker sets them and pushes
// this replica's part of them (Scale) to the queue, again whenever a share
// moves (its Reshare is the Cluster's OnShares); its Demand is the
// Cluster's Settings.Demand. Lock order: Windows' mutex, then the queue's
// or the shares' (Scale); the Cluster calls Demand and OnShares outside
// its locks, and Demand reads the queue before it takes Windows' mutex.
//
// A lease reserves, in Redis, max(the cap its replica ran, what it had in
// flight, the new grant) until its expiry (LeaseTTL after its renewal):
// slots above a shrunk grant still run until they end, and a grant whose
// answer was lost is still counted. Past its expiry it reserves only its
// floor, min(its cap, base ÷ the most replicas its replica has seen), for
// ForgetAfter more; then Redis forgets it.
//
// Each beat carries a number that rises with every beat (at least the
// time in µs, so across restarts too); Redis refuses one not above the
// number its entry holds, so a beat a stalled link delivers late cannot
// write back an older cap or floor.
//
// Without Redis a replica keeps its caps for LeaseTTL/2 after its last
// renewal that answered, then lowers each to that floor, never above the
// least floor Redis may hold for it (a pod it was never granted gets the
// floor), so what it runs above the floor has the
// other half of the lease to finish.
//
// # A new epoch
//
// A Redis that is new or lost its data (a restart, FLUSHALL) has no epoch
// key; the first heartbeat starts a new epoch. Replicas still running may
// hold shares granted before it, which the new Redis does not know until
// each writes back what it holds with its next beat. So for one LeaseTTL
// no replica that was ever granted a slot of a pod (a holder) is granted
// more of it than the cap it runs. A fresh replica, never granted a slot
// of the pod, holds nothing Redis could have lost: once the write-back
// time (2 × HeartbeatInterval + Timeout) has passed since the epoch
// began, it may be granted up to its floor, the base ÷ the most replicas
// it has seen and ÷ the replicas alive now (what it would run without
// Redis). Without that, a deployment on a new Redis would serve nothing
// for a lease time (issue 35).
//
// A replica that cannot reach the new Redis (a partition, calls over
// Timeout) runs without an entry: its cap until it lapses, LeaseTTL/2
// after its last renewal, and its floor after that. So a replica that
// learns of a new epoch (an answer names another epoch than the one
// before) sends, for LeaseTTL + ForgetAfter, the most replicas it had seen
// before it (prior), and each beat counts every prior replica beyond the
// pod's entries (its own included) as missing: reserving the beating
// replica's floor, as the lost entry would have for that long. While one
// is missing, a fresh replica too waits out the first lease time.
//
// Why the pod's window still holds. A replica runs its cap, or more while
// requests admitted under a larger cap end, and once it has beaten in the
// epoch that is at most what its entry reserves (the entry holds max(cap,
// in flight, grant), the cap becomes the grant, a lapse only lowers it).
// Every grant is at most base less what every other entry and every
// missing replica reserves, in one atomic script. So the pod runs at most
// base unless some replica runs without an entry (a holder, from before
// the epoch until its first beat in it) beyond what is reserved for the
// missing. The cases:
//
//   - Two or three replicas start together on a new Redis: nothing was
//     granted before the epoch, so every cap has its entry, and none has
//     seen another epoch, so none is missing. The beats run one after
//     another, each grant within what the others' entries leave. Base 10
//     and three fresh replicas: none is granted before the write-back
//     time; then each gets at most ⌊10/3⌋ = 3 and at most what is left, 9
//     in all; after the lease time the fair split of all 10. The floor
//     only keeps the first to beat from taking the room of the others;
//     base − others alone keeps the sum.
//   - One replica holds shares granted in this epoch when another starts:
//     its entry reserves them, and the newcomer is granted at most what
//     is left. More comes to it as the holder gives back: a holder's grant
//     may shrink during the first lease time, only growth is held.
//   - Redis restarts empty while replicas hold shares, and a fresh replica
//     starts: the holders' caps run without an entry until each beats.
//     Each holder that reaches Redis beats at least every 1¼ heartbeat
//     intervals (Run looks every quarter interval), and its call lands
//     within Timeout, so by the write-back time each has its entry; the
//     fresh replica is granted nothing before that, and after it only what
//     those entries leave. Had it been granted at once, its floor and an
//     old holder's cap could together pass the base.
//   - Redis restarts empty under a holder that cannot reach it: it runs
//     its cap until it lapses, which is before the epoch is LeaseTTL/2
//     old (its last renewal was before the restart), and its floor after.
//     Every replica that had seen it and reaches the new Redis counts it
//     missing from its second beat there on (the answer to the first
//     tells it of the new epoch): a holder does not grow in the first
//     lease time, a fresh replica waits it out too (its floor could join
//     the missing one's cap), and after it every grant leaves the missing
//     one's floor free, until it beats again or for LeaseTTL +
//     ForgetAfter, as long as its lost entry would have kept the floor;
//     then it counts as gone, as a replica cut off that long does. Its
//     floor and the beating replica's are the base ÷ the replicas each
//     has seen, the same set as a rule.
//
// The last two cases need the beats to know every replica that may run
// without an entry. Two do not: a replica that joins after the restart
// (it starts, or first reaches Redis there) has seen no other epoch, so it
// sends no prior, and its entry hides a missing one from the count of the
// others' beats; and a replica whose first beat in the epoch comes after
// the write-back time sends it before it learnt of the restart, so, fresh
// on a pod, it may be granted its floor without counting the missing.
// Either, with a holder missing (cut off across the restart, or its beats
// lost), is the fault of a replica cut off: the pod may run above its
// window by what the missing one runs without an entry, its cap until it
// lapses and its floor after that, until it beats again and the requests
// above the new grants end.
//
// # Buckets
//
// Limiter is a global token bucket and optional buckets per client key in
// Redis (a GCRA in a Lua script, on Redis's clock). A replica takes tokens
// in batches: a batch doubles while it runs out before it goes stale (at
// most this replica's share of the burst), shrinks to what was used when
// it does, and is dropped 250 ms after it was taken, so a steady stream
// costs one Redis call per batch and a bucket seen now and then one per
// request. A refusal is remembered until the bucket holds a token again.
// Gate puts the request path's buckets together: the fast breaker (Allow)
// and each traffic class's and model's own (Classes, Models), deciding
// through Redis and otherwise with breaker's buckets at this replica's
// share (Share), resized by Reshare when OnChange reports local mode.
//
// # Token quotas
//
// Quotas is quota.Quotas (tokens per minute and per day, per client key,
// traffic class and model; see package quota for the sliding window and
// the bound it keeps) summed over every replica. Each Charge is one atomic
// Lua call that trims, checks and charges every window of every applicable
// key, all or nothing, on Redis's clock; each Settle is one more, which
// trues the charge up in the bucket it went into. No batches are taken
// ahead, as they are for the buckets: a token quota's charge is a
// request's estimate, and what one replica held back the others could not
// use. The windows' buckets are those of package quota (1 s for the
// minute, 10 min for the day), so the bound holds over all replicas
// together: the requests admitted in any window use at most the quota
// plus the underestimates of those in flight when the last was admitted.
//
// While Redis does not answer (Up is false, or the call fails or times
// out) the replica decides with its own *quota.Quotas, whose limits are
// this replica's share: each limit divided by the most replicas seen
// within ForgetAfter, rounded down, at least 1; Charge sets them again
// when that count changes. The local Quotas also counts every charge this
// replica made in Redis (forced: Redis had decided), so a replica that
// loses Redis still counts what it charged: its share is reduced by its
// own recent use, though not by the other replicas'. So in the window
// (minute or day) after Redis is lost the replicas together admit at most
// what Redis had counted plus the sum of the shares, twice the quota, and
// from a window on at most the quota; the same holds after Redis comes
// back, since it never learns what was charged locally (and after a
// restart it has lost the rest). A replica started while Redis is out of
// reach divides by Settings.Replicas until its first heartbeat. A
// Settle of a charge made in Redis while Redis is gone trues up the local
// copy and is dropped from Redis: Redis cannot be reached, a true-up kept
// for later would land in a window that has moved on (and a restarted
// Redis has lost the charge anyway), and the local copy is what decides
// meanwhile. A dropped refund only makes Redis stricter until the charge
// expires; a dropped excess is missed by the other replicas, by at most
// that request's underestimate.
//
// # Clock
//
// Every expiry and every bucket is computed inside the Lua scripts from
// Redis's own clock (redis.call('TIME')), so replicas whose clocks disagree
// still agree on the shared state; the lapse to the floor runs on this
// replica's clock, from when its last answered renewal was sent.
// Settings.Now replaces both clocks; it exists for tests and replays on a
// virtual clock and must stay nil in production.
//
// # Modes
//
// A Cluster is in shared mode (Up reports true) after a heartbeat succeeds,
// and in local mode before the first one and after Settings.DownAfter
// consecutive Redis calls failed or timed out (Settings.Timeout bounds every
// call). In local mode Limiter.Allow returns ErrUnavailable and the caller
// decides with its own limiter at its share; the leases keep their caps
// until they lapse; only the heartbeat probes Redis, and the first one that
// succeeds switches back. Settings.OnChange hears every switch, once, in
// order; Settings.OnShares hears every change of a share.
//
// The request path's calls (Gate.Allow, Keyed.Allow, Quotas.Charge) take
// the request's context: each ends when its client leaves, even while Redis
// has not answered, and the request is decided locally. A context that
// ended is no Redis failure: it never counts towards DownAfter. A charge's
// Settle, which runs after the response (often after the client left),
// uses the request's context without its cancellation, still bounded by
// Settings.Timeout.
//
// # Redis
//
// One Redis server, or a primary behind Sentinel with a fixed address:
// scripts touch several keys, so Redis Cluster is not supported. Keys start
// with Settings.KeyPrefix: "rate:global", "rate:client:<key>" (strings that
// expire once the bucket is full again), "lease:<pod>" (a hash, one field
// per replica, that expires LeaseTTL + ForgetAfter after its last write),
// "replicas" (a sorted set), "epoch" (a string without expiry) and
// "quota:<kind>:<hex SHA-256 of the name>:<minute|day>", kind "client",
// "class" or "model": a hash of one window's buckets (field "lo" the
// oldest bucket kept, "sum" their tokens, and one field per bucket named
// by its index, the time in µs divided by the bucket's length), which
// expires once its newest bucket is no longer counted (at most 61 s and
// 24h10m after the last write). Neither a client key nor a class or model
// name reaches Redis in clear.
//
// Nothing here logs or exports metrics: state is reported through Up,
// Snapshot, OnChange and OnShares, and the caller turns it into log lines
// and gauges.
package cluster
