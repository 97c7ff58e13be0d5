package main

import (
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/policy"
	"github.com/gatekeeper-dev/gatekeeper/internal/scale"
)

// newScaler builds the scaling signal when the policy has a scaling section
// (restart-only) and returns its per-model tally, the core's Options.Pools.
func (a *app) newScaler(cfg *config.Config) (pools decide.PoolCounter, err error) {
	if cfg.Scaling != nil {
		a.scaler, err = scale.New(policy.ScaleSettings(cfg.Scaling, a.opts.now), a.reg)
		pools = a.scaler.Tally() // nil-safe; unused on err
	}
	return pools, err
}

// scalePools is /admin/scale's source: nil while scaling is off.
func (a *app) scalePools() func() any {
	if a.scaler == nil {
		return nil
	}
	return func() any { return a.scaler.Snapshot() }
}
