package main

import (
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/policy"
	"github.com/gatekeeper-dev/gatekeeper/internal/scale"
)

// newScaler builds the scaling signal when the policy has a scaling
// section (restart-only); it reads the app's own metrics (scale.Gather).
func (a *app) newScaler(cfg *config.Config) (err error) {
	if cfg.Scaling != nil {
		a.scaler, err = scale.New(policy.ScaleSettings(cfg.Scaling, a.opts.now), a.reg)
	}
	return err
}

// scalePools is /admin/scale's source: nil while scaling is off.
func (a *app) scalePools() func() any {
	if a.scaler == nil {
		return nil
	}
	return func() any { return a.scaler.Snapshot() }
}
