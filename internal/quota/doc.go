// Package quota counts tokens against quotas (tokens per minute and per
// day) of client keys, traffic classes and models, so that concurrent
// requests cannot overspend a quota by more than what is in flight.
//
// A request's cost is known only when its response ends, so Charge takes
// the request's estimate (its prompt estimate plus its most output tokens)
// at admission, against every quota that applies to it, all or nothing,
// and the Settler it returns trues the charge up from the response's real
// usage when it ends. Had admission waited for the usage, every request in
// flight would be admitted against a window that does not count it yet:
// 64 streams started together each see an empty window (LiteLLM's TPM
// limit was overspent 6.6× that way, BerriAI/litellm#18730).
//
// # Keys and quotas
//
// Limits names the quotas: PerClient for every client key (each its own),
// Clients to override it for some keys (named ClientName(key), the key's
// SHA-256, so that the policy holds no secret), Classes and Models by
// name. Each Limit has a per-minute and a per-day field; 0 is no limit in
// that window. A request is charged against its client key's quota, its
// class's and its model's; a kind whose name is empty in the Ask, or
// without a quota, does not apply, and a request to which none applies is
// charged nothing. A key with a quota is charged in both windows, also one
// whose limit is 0, so that a reload that sets that limit finds what was
// charged. Client keys are hashed on entry; the raw key is never stored,
// and errors and snapshots name a client "sha256:" and 12 hex digits.
//
// # The sliding window
//
// Each key counts each window in buckets of exact token counts: the minute
// in 1 s buckets, the day in 10 min buckets. A window of length W holds
// the current bucket and the W/G buckets before it (61 and 145), and a
// charge made in bucket b is counted until the end of bucket b + W/G: its
// expiry is rounded up to a bucket's end, so every charge is counted for
// at least W and at most W + G, and no true sliding window (t−W, t] ever
// holds a charge that the counted window at t did not. A key keeps only
// the buckets from its oldest non-empty one still counted to its newest,
// so one seen once holds one bucket per window, and one busy all the time
// at most 61 + 145 counts (1.6 KB).
//
// The day's buckets are 10 minutes long, not one: a busy key then holds
// 145 counts instead of 1441 (1.2 KB, not 11.5 KB: 1.1 GB at
// DefaultMaxClients), and the cost is that a day's charge is counted for
// up to 24h10m, so a key at its daily limit may wait up to 10 minutes more
// than it would with exact timestamps. The minute's 1 s buckets make the
// same excess at most a second, which Retry-After rounds to anyway.
//
// # Admission
//
// A request fits a window when what it counts plus the charge is at most
// the limit. The charge is the estimate, clamped to the limit: an estimate
// above the whole limit runs once the window is empty, instead of never.
// When some window of some applicable key has no room, Charge charges
// nothing and returns an *ExceededError (errors.Is ErrExceeded) for the
// window that has room last; its RetryAfter is when enough of that
// window's oldest buckets will have expired for the charge to fit, if
// nothing else is charged meanwhile, and at least 1 s. Ask.Force charges
// all the same and still returns the error: a shadow mode that counts and
// reports without refusing.
//
// # True-up
//
// Settler.Settle(actual) replaces the estimate with actual in each window
// charged: the difference goes into the bucket the charge went into while
// that bucket is still counted, so a refund makes room at once and an
// excess counts against the requests that follow; once that bucket has
// expired, an excess goes into the current bucket (it is still counted a
// full window) and a refund is dropped (there is nothing left to refund).
// Only the first call counts.
//
// # The bound
//
// Take any true sliding window of length W and the requests admitted in
// it, k the last of them. When k was admitted, the window counted every
// other one at its charge or, if settled, at its actual usage, and there
// was room for k's charge; a request's counted amount changes after that
// only when it settles. So the real usage of the requests admitted in any
// window of W is at most
//
//	Q + Σ max(0, actual − charge) over those in flight when the last was admitted
//
// where Q is the limit: with actuals at most their estimates (an estimate
// that bounds the output), never more than Q; otherwise at most Q plus
// the underestimates of the requests in flight, and with actuals within
// twice their charge, at most Q plus the charges in flight. Underestimates
// of requests already settled count against later admissions instead.
// (Force, by design, is outside this bound.)
//
// # Memory and reloads
//
// Settings.MaxClients bounds the client keys remembered (classes and
// models are bounded by the policy): past it a new key makes room by
// forgetting, among the 16 least recently charged, the least recent one
// whose windows are empty, else the least recently charged of all, whose
// charges are then lost. A settle of a forgotten key's charge is dropped.
// SetLimits replaces the quotas; what was charged stays counted.
//
// Every method is safe for concurrent use: one mutex guards the counts,
// held for a few hundred nanoseconds per Charge or Settle. Time comes from
// Settings.Now; a clock that steps back is held at the latest time seen.
// Nothing here logs: state is reported through errors and Snapshot.
package quota
