// Package admin computes the admin listener's documents: the /admin/state
// JSON document (Snapshot, StateHandler), the Prometheus collectors that
// export the same state and the pressure readings at scrape time
// (NewStateCollector, NewPressureCollector), and the embedded status page
// that renders them (StatusPage).
//
// It reads every other package through the funcs of Sources, so it holds no
// state of its own and needs no running gatekeeper to test. RequireToken is
// the listener's bearer-token check. Routing, reading the token file and the
// profiler stay with the command that serves the listener.
package admin
