// Package policy is the policy's life in a running gatekeeper: loading the
// file, expanding its discovered upstreams (DNS names, InferencePools),
// mapping it onto every package's Settings (Settings, From), checking them
// all, and swapping them in.
//
// A change takes effect in two steps. Keeper.Prepare does everything that
// can fail, changing nothing that runs: the expansion, the Settings, the
// admin token file, and a check of every package's settings (the limiters,
// the queue, the quotas, the controller, a new pressure Monitor built but
// not started). Plan.Apply swaps the result in and cannot fail. Commit runs
// both under one lock and is the one path by which a policy takes effect:
// at start, on a reload (the file watcher, SIGHUP: Reload), after a DNS
// discovery round (Discover) and when the watched InferencePools change.
// A round that resolved for a policy a reload replaced meanwhile changes
// nothing (ErrPolicyMoved).
//
// An applied reload logs "policy reloaded" and one "policy key changed"
// line per key it changed, with its old and new values (config.Changes),
// and counts in gatekeeper_config_reloads_total.
package policy
