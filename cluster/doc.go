// Package cluster lets several gatekeeper replicas act as one (issue 13,
// DESIGN §10): they share their token buckets and each pod's in-flight
// window through one Redis, and each falls back to its share of every limit
// when Redis cannot be reached.
//
// A Cluster is one replica's handle on the shared state. Create one with New
// and run its loop with Run. It offers three building blocks:
//
//   - Limiter: a global token bucket and optional buckets per client key,
//     decided by one atomic Redis call (a GCRA in a Lua script) per request.
//     A refusal consumes nothing and says how long to wait.
//   - Acquire / Release: window slots as leases. A lease is a member of a
//     sorted set per pod whose score is its expiry; Acquire adds one only
//     while the live leases of the pod, summed over replicas, are below the
//     limit. Run renews this replica's leases, so the slots of a replica that
//     dies free themselves within Settings.LeaseTTL.
//   - Heartbeat: Run announces the replica every Settings.HeartbeatInterval
//     and learns how many replicas are alive; Share divides a limit by the
//     last count it learned.
//
// # Clock
//
// Every expiry and every bucket is computed inside the Lua scripts from
// Redis's own clock (redis.call('TIME')), so replicas whose clocks disagree
// still agree on the shared state. Settings.Now replaces that clock in every
// script; it exists for tests and replays on a virtual clock and must stay
// nil in production.
//
// # Modes
//
// A Cluster is in shared mode (Up reports true) after a heartbeat succeeds,
// and in local mode before the first one and after Settings.DownAfter
// consecutive Redis calls failed or timed out (Settings.Timeout bounds every
// call). In local mode nothing touches Redis on the request path; only the
// heartbeat probes it, and the first one that succeeds switches back.
// Settings.OnChange hears every switch, once, in order.
//
// What the caller does in each mode:
//
//   - Limiter.Allow returns an error matching ErrUnavailable whenever it
//     could not decide through Redis (local mode, or a call that failed).
//     The caller then decides with its own local limiter configured at its
//     share: Share(qps) and Share(burst), rounded up to at least 1. The
//     count behind Share cannot change while Redis is unreachable, so
//     configuring the local limiter when OnChange reports false (and at
//     start, from Settings.Replicas) is enough. A token bucket holds
//     nothing across the switch: a request is decided by exactly one bucket,
//     never both, so none is admitted twice. A call that timed out may still
//     have taken a token in Redis; that errs on the safe side.
//   - Acquire never hands the fallback to the caller: in local mode (or
//     when its Redis call fails) it admits while this replica holds fewer
//     than max(1, ⌊Share(limit)⌋) leases for the pod, counting the leases it
//     took in shared mode that are still running. Every lease, shared or
//     local, is released with Release exactly once when its request ends.
//     The heartbeat that switches back to shared mode first writes every
//     lease this replica holds into Redis (a local lease becomes shared, a
//     shared one that expired during the outage is restored) and removes the
//     ones released meanwhile; a lease whose release could not reach Redis
//     is removed by a later heartbeat or expires within LeaseTTL. So no slot
//     is counted twice or left held across the switch.
//
// Gate puts these blocks together for the request path: the fast breaker
// (Allow), each traffic class's and model's own bucket (Classes, Models) and
// each pod's window (Acquire), deciding through Redis and otherwise with
// breaker's buckets at this replica's share, resized by Reshare when
// OnChange reports local mode.
//
// Limits of the fallback: while one replica is cut off from Redis and the
// others are not, the pod may see up to that replica's share on top of the
// shared limit; a replica that stalls longer than LeaseTTL (a long pause)
// loses its leases in Redis until its next heartbeat restores them.
//
// # Redis
//
// One Redis server, or a primary behind Sentinel with a fixed address:
// scripts touch several keys, so Redis Cluster is not supported. Keys start
// with Settings.KeyPrefix: "rate:global", "rate:client:<key>" (strings that
// expire once the bucket is full again), "lease:<pod>" (sorted sets that
// expire LeaseTTL after their last write) and "replicas" (a sorted set).
//
// Nothing here logs or exports metrics: state is reported through Up,
// Snapshot and OnChange, and the caller turns it into log lines and gauges.
package cluster
