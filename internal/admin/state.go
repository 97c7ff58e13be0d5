package admin

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// Sources are what Snapshot reads. Every func must be set, but Now. Breaker
// and Slow are called once per upstream, the others once per snapshot; all
// must be safe for concurrent use (scrapes and /admin/state requests run in
// parallel).
type Sources struct {
	// Version is the running build's version.
	Version string
	// Config returns the running policy.
	Config func() *config.Config
	// Ready and Draining report the decision core's readiness and drain
	// (decide.Core.Unready, Draining), which both fronts answer from.
	Ready, Draining func() bool
	// Queue returns the admission queue's stats.
	Queue func() queue.Stats
	// Upstreams returns the traffic handler's view of each upstream, in
	// the document's order.
	Upstreams func() []pods.Status
	// Breaker returns the upstream's error breaker state; false when the
	// upstream has none (the document says "none").
	Breaker func(name string) (breaker.State, bool)
	// Slow returns the upstream's slow-path state and its last level
	// change (nil before the first); false for an unknown upstream.
	Slow func(name string) (breaker.SlowState, *control.Cause, bool)
	// LevelChanges, if set, returns the latest level changes over every
	// upstream, newest first (control.Controller.Changes).
	LevelChanges func() []control.LevelChange
	// Ceiling, if set, returns the upstream's window ceiling since it
	// failed under load and when that was set (0 while none holds).
	Ceiling func(name string) (int, time.Time)
	// Pressure returns the latest pressure readings.
	Pressure func() pressure.State
	// Scorer, if set, returns the pod scorer's last inputs for the
	// upstream (route.Router.PodState); false before the first round.
	Scorer func(name string) (route.Pod, bool)
	// Quotas, if set, returns the token quotas' use (a JSON value:
	// quota.Snapshot); shown only with quotas in the policy.
	Quotas func() any
	// Cluster, if set, returns the state shared with other replicas (a
	// JSON value: cluster.Snapshot); nil without cluster mode.
	Cluster func() any
	// Now returns the document's time. Nil means time.Now.
	Now func() time.Time
}

// State is the /admin/state document. Its JSON form is read by the status
// page, by operators' scripts and by the tests: field names are an API.
type State struct {
	Version   string                 `json:"version"`
	Mode      string                 `json:"mode"`
	Ready     bool                   `json:"ready"`
	Draining  bool                   `json:"draining"`
	Time      time.Time              `json:"time"`
	Upstreams []Upstream             `json:"upstreams"`
	Queue     Queue                  `json:"queue"`
	Limits    map[string]float64     `json:"limits"`
	Sources   []pressure.SourceState `json:"sources"`
	// SignalUnits gives every signal's unit (pressure.SignalInfo.Unit), so
	// that the status page shows bytes as bytes and counts as whole numbers.
	SignalUnits map[pressure.Signal]string `json:"signal_units"`
	// LevelChanges are the latest level changes over every upstream, newest
	// first, as many as the controller keeps (control.ChangeHistory); [] before
	// the first. The status page lists them on its first load.
	LevelChanges []control.LevelChange `json:"level_changes"`
	// Classes are the policy's traffic classes, if it has any.
	Classes []Class `json:"classes,omitempty"`
	// Tenants is the queue's fair share between tenants (fairness on).
	Tenants *Tenants `json:"tenants,omitempty"`
	// Quotas is the token quotas' use (quotas in the policy).
	Quotas any `json:"quotas,omitempty"`
	// Cluster is the state shared with the other replicas, in cluster mode.
	Cluster any `json:"cluster,omitempty"`
}

// Class is one traffic class in State. Waiting counts the queued requests
// of its priority (classes that share a priority share the count).
type Class struct {
	Name      string  `json:"name"`
	Priority  int     `json:"priority"`
	Sheddable bool    `json:"sheddable"`
	QPS       float64 `json:"qps,omitempty"`
	Waiting   int     `json:"waiting"`
}

// Upstream is one upstream's entry in State.
type Upstream struct {
	pods.Status
	Breaker     string `json:"breaker"`
	WindowLimit int    `json:"window_limit"`
	InFlight    int    `json:"inflight"`
	MaxInflight int    `json:"max_inflight"`
	MinInflight int    `json:"min_inflight"`
	// WindowCeiling is the most the window may grow to since the pod failed
	// under load (batch.failure_hold), set at WindowCeilingSince; absent
	// while none holds.
	WindowCeiling      int        `json:"window_ceiling,omitempty"`
	WindowCeilingSince *time.Time `json:"window_ceiling_since,omitempty"`
	// MemoryBudgetBytes bounds the estimated memory of the requests in
	// flight (memory admission, upstreams[].vocab_size); MemoryHeldBytes is
	// theirs. Both absent while memory admission bounds nothing.
	MemoryBudgetBytes int64  `json:"memory_budget_bytes,omitempty"`
	MemoryHeldBytes   int64  `json:"memory_held_bytes,omitempty"`
	Level             string `json:"level"`
	Phase             string `json:"phase"`
	// LastChange is the latest level change and the signal that caused it.
	LastChange *control.Cause `json:"last_change,omitempty"`
	// Signals are the pressure readings (worst over the pod's GPUs), each
	// with its source and age; Absent lists the signals no source provides.
	Signals map[pressure.Signal]pressure.Value `json:"signals"`
	Absent  []pressure.Signal                  `json:"absent"`
	GPUs    []pressure.GPUState                `json:"gpus,omitempty"`
	Rules   map[string]Rule                    `json:"rules"`
	// Scorer is the pod scorer's last inputs; absent before the first
	// pressure round.
	Scorer *Scorer `json:"scorer,omitempty"`
}

// Rule shows a rule's thresholds next to the signal they judge.
type Rule struct {
	Degrade *float64 `json:"degrade,omitempty"`
	Shed    *float64 `json:"shed,omitempty"`
	// Horizon is a trend rule's projection, as a Go duration ("2s").
	Horizon string `json:"horizon,omitempty"`
	// For is how long a value must hold a level before it is entered, as a
	// Go duration ("2s").
	For string `json:"for,omitempty"`
}

func ruleOf(r config.Rule) Rule {
	out := Rule{Degrade: r.Degrade, Shed: r.Shed}
	if r.Horizon > 0 {
		out.Horizon = r.Horizon.String()
	}
	if r.For > 0 {
		out.For = r.For.String()
	}
	return out
}

// Queue is the admission queue's entry in State.
type Queue struct {
	Length int    `json:"length"`
	Tokens int64  `json:"tokens"`
	Order  string `json:"order"`
}

// Snapshot assembles the state document from every package's snapshot.
func Snapshot(src Sources) State {
	now := time.Now
	if src.Now != nil {
		now = src.Now
	}
	cfg := src.Config()
	qs := src.Queue()
	windows := make(map[string]queue.WindowStats, len(qs.Windows))
	for _, w := range qs.Windows {
		windows[w.Name] = w
	}
	bounds := map[string][2]int{}
	vocab := map[string]int64{}
	for _, u := range cfg.Upstreams {
		bounds[u.Name] = [2]int{u.MinInflight, u.MaxInflight}
		vocab[u.Name] = u.VocabSize
	}
	s := State{
		Version: src.Version, Mode: string(cfg.Mode), Ready: src.Ready(), Draining: src.Draining(),
		Time:   now().UTC(),
		Queue:  Queue{Length: qs.Length, Tokens: qs.Tokens, Order: qs.Order.String()},
		Limits: map[string]float64{"qps": cfg.FastBreaker.QPS, "burst": float64(cfg.FastBreaker.Burst)},
	}
	if cfg.Classes != nil {
		for _, c := range cfg.Classes.List {
			s.Classes = append(s.Classes, Class{Name: c.Name, Priority: c.Priority, Sheddable: c.Sheddable(),
				QPS: c.QPS, Waiting: qs.ByPriority[c.Priority]})
		}
	}
	if cfg.Fairness != nil {
		s.Tenants = tenantsOf(qs)
	}
	if cfg.Quotas != nil && src.Quotas != nil {
		s.Quotas = src.Quotas()
	}
	if src.Cluster != nil {
		s.Cluster = src.Cluster()
	}
	ps := src.Pressure()
	s.Sources = ps.Sources
	s.SignalUnits = make(map[pressure.Signal]string, len(pressure.Signals()))
	for _, sig := range pressure.Signals() {
		s.SignalUnits[sig] = sig.Info().Unit
	}
	s.LevelChanges = []control.LevelChange{}
	if src.LevelChanges != nil {
		s.LevelChanges = src.LevelChanges()
	}
	rules := map[string]Rule{}
	for sig, r := range cfg.Pressure.Rules {
		rules[string(sig)] = ruleOf(r)
	}
	for _, u := range src.Upstreams() {
		w := windows[u.Name]
		us := Upstream{Status: u, WindowLimit: w.Limit, InFlight: w.InFlight,
			MinInflight: bounds[u.Name][0], MaxInflight: bounds[u.Name][1], Breaker: "none"}
		if w.MemoryBudget > 0 { // the queue counts bytes per vocabulary entry
			us.MemoryBudgetBytes, us.MemoryHeldBytes = w.MemoryBudget*vocab[u.Name], w.MemoryHeld*vocab[u.Name]
		}
		if b, ok := src.Breaker(u.Name); ok {
			us.Breaker = b.String()
		}
		if src.Ceiling != nil {
			if c, at := src.Ceiling(u.Name); c > 0 {
				at = at.UTC()
				us.WindowCeiling, us.WindowCeilingSince = c, &at
			}
		}
		if st, cause, ok := src.Slow(u.Name); ok {
			us.Level, us.Phase, us.LastChange = st.Level.String(), st.Phase.String(), cause
		}
		if p, ok := ps.Upstream(u.Name); ok {
			us.Signals, us.Absent, us.GPUs = p.Signals, p.Absent, p.GPUs
		}
		us.Rules = rulesFor(rules, cfg, u.Name)
		if src.Scorer != nil {
			if p, ok := src.Scorer(u.Name); ok {
				us.Scorer = scorerOf(p)
			}
		}
		s.Upstreams = append(s.Upstreams, us)
	}
	return s
}

// StateHandler serves the document snapshot returns as indented JSON, never
// cached.
func StateHandler(snapshot func() State) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(snapshot())
	})
}

// rulesFor is the file's rules with the named upstream's own overrides
// merged over them ({} removes one), as control.SlowSettings merges them.
func rulesFor(file map[string]Rule, cfg *config.Config, name string) map[string]Rule {
	for _, u := range cfg.Upstreams {
		if u.Name != name || len(u.Rules) == 0 {
			continue
		}
		out := make(map[string]Rule, len(file))
		for sig, r := range file {
			out[sig] = r
		}
		for sig, r := range u.Rules {
			if r.Degrade == nil && r.Shed == nil {
				delete(out, string(sig))
				continue
			}
			out[string(sig)] = ruleOf(r)
		}
		return out
	}
	return file
}
