package policy

import (
	"context"
	"errors"
	"log/slog"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/discovery"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// Plan is a policy built and checked against every package, ready to
// apply. Create one with Keeper.Prepare.
type Plan struct {
	k        *Keeper
	raw, cfg *config.Config
	resolved discovery.Resolved
	ownNS    string
	s        Settings
	ctl      control.Settings
	pressure pressure.Settings
	monitor  *pressure.Monitor // nil: the current monitor stays
	token    string
}

// Config is the policy the Plan applies, its discovered upstreams expanded.
func (p *Plan) Config() *config.Config { return p.cfg }

// Settings are the packages' Settings of the Plan's policy.
func (p *Plan) Settings() Settings { return p.s }

// Control is the controller's Settings of the Plan's policy.
func (p *Plan) Control() control.Settings { return p.ctl }

// Prepare builds everything raw needs with its discovered upstreams
// expanded to r (DNS) and to the watched pools' ready pods, and checks it
// against every package, changing nothing that runs. The Plan's Apply then
// cannot fail. Call Prepare and Apply through Commit, which serialises
// them, except for the first Plan, applied before anything runs.
func (k *Keeper) Prepare(raw *config.Config, r discovery.Resolved) (*Plan, error) {
	k.mu.Lock()
	ns, pools := k.ownNS, k.pools
	k.mu.Unlock()
	if ns == "" { // a reload may name the first pool without a namespace
		var err error
		if ns, err = ownNamespace(raw, k.o.Namespace); err != nil {
			return nil, err
		}
	}
	p := &Plan{k: k, raw: raw, resolved: r, ownNS: ns, cfg: discovery.ExpandPools(discovery.Expand(raw, r), pools, ns)}
	var err error
	if p.s, err = from(p.cfg); err != nil {
		return nil, err
	}
	if p.token, err = loadAdminToken(p.cfg.Server.AdminTokenFile); err != nil {
		return nil, err
	}
	p.ctl = control.FromPolicy(p.cfg)
	if err := p.check(); err != nil {
		return nil, err
	}
	p.pressure = pressureSettings(p.cfg, k.o.Sources)
	if p.monitor, err = k.o.Pressure.Prepare(p.pressure); err != nil {
		return nil, err
	}
	return p, nil
}

// check runs every package's own check of the Plan's settings: each error
// Apply could meet is met here.
func (p *Plan) check() error {
	_, lerr := breaker.NewLimiter(p.s.Limiter) // the cluster gate's rules are the limiter's
	_, qerr := queue.NewCore(p.s.Queue)
	var cerr error
	if c := p.k.t.Controller; c != nil {
		cerr = c.Check(p.ctl)
	} else { // the first Plan: the caller builds the controller from it
		_, cerr = control.New(p.ctl)
	}
	_, rerr := route.New(p.s.Routing)
	return errors.Join(lerr, qerr, breaker.CheckLimiterSet(p.s.classes), breaker.CheckLimiterSet(p.s.models),
		p.s.quotas.Validate(), cerr, rerr)
}

// Apply puts the Plan's policy in place. Every step was checked by
// Prepare, so none fails; should a package refuse what its own check
// accepted (a programming slip), the log says so and the step is skipped.
// Work already admitted is never cancelled.
func (p *Plan) Apply() {
	k, t := p.k, &p.k.t
	old := k.current.Load()
	k.token.Store(&p.token)
	k.applied("limiter", t.Limiter.Update(p.s.Limiter))
	if t.Gate != nil {
		k.applied("cluster limiter", errors.Join(t.Gate.Update(p.s.Limiter), t.Gate.SetKeyed(p.s.classes, p.s.models)))
	}
	k.applied("limiters", errors.Join(t.Classes.Set(p.s.classes), t.Models.Set(p.s.models)))
	k.applied("quotas", t.Quotas.SetLimits(p.s.quotas))
	k.applied("queue", t.Queue.UpdateSettings(p.s.Queue))
	k.applied("controller", t.Controller.Update(p.ctl))
	removed := t.SetPods(p.s)
	for _, name := range removed {
		t.Windows.Drop(name)
	}
	p.applyRouting(removed)
	if t.Shares != nil {
		t.Shares.SetPods(bases(p.s.Upstreams))
	}
	t.Core.SetPolicy(p.s.Policy)
	// Each pod's window: the controller's (cut windows stay cut across a
	// reload, clamped into the new bounds); at its maximum in observe mode.
	for _, u := range p.s.Upstreams {
		limit := u.maxInflight
		if st, _, ok := t.Controller.State(u.Name); ok && p.cfg.Mode != config.ModeObserve {
			limit = st.Limit
		}
		t.Windows.SetWindow(u.Name, limit)
	}
	k.o.Pressure.Replace(p.monitor, p.pressure)
	if k.o.Level != nil {
		k.o.Level.Set(p.cfg.Log.Level.Slog())
	}
	if old != nil {
		if restart := config.RestartOnly(config.Diff(old, p.cfg)); len(restart) > 0 {
			k.o.Log.LogAttrs(context.Background(), slog.LevelWarn, "these keys take effect only after a restart",
				slog.String("state", "pending_restart"), slog.Any("keys", restart))
		}
	}
	k.mu.Lock()
	k.resolved, k.ownNS = p.resolved, p.ownNS
	k.mu.Unlock()
	k.raw.Store(p.raw)
	k.current.Store(p.cfg)
}

// applied logs a step that Prepare's check should have refused.
func (k *Keeper) applied(what string, err error) {
	if err != nil {
		k.o.Log.LogAttrs(context.Background(), slog.LevelError, "policy: a checked setting was refused; the running one stays",
			slog.String("what", what), slog.String("err", err.Error()))
	}
}
