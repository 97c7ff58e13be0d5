package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/discovery"
)

// discover re-resolves the discovery hosts every interval (the shortest
// dns_interval of the policy) and applies a changed address set at once.
func (a *app) discover(ctx context.Context) {
	for {
		interval := time.Duration(0)
		for _, u := range a.raw.Load().Upstreams {
			if u.DNSInterval > 0 && (interval == 0 || u.DNSInterval < interval) {
				interval = u.DNSInterval
			}
		}
		if interval == 0 {
			interval = 10 * time.Second // nothing to discover now; look again after a reload
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := a.rediscover(ctx); err != nil {
			a.log.LogAttrs(ctx, slog.LevelError, "discovered upstreams not applied", slog.String("err", err.Error()))
		}
	}
}

// rediscover resolves now and applies the policy again if addresses changed.
func (a *app) rediscover(ctx context.Context) error {
	raw := a.raw.Load()
	hosts := discovery.Hosts(raw)
	if len(hosts) == 0 {
		return nil
	}
	a.mu.Lock()
	prev := a.resolved
	a.mu.Unlock()
	next := discovery.Resolve(ctx, a.lookup, hosts, prev)
	if prev.Equal(next) {
		return nil
	}
	err := a.commit(raw, next, raw)
	switch {
	case errors.Is(err, errPolicyMoved):
		a.log.LogAttrs(ctx, slog.LevelDebug, "discovery round dropped: the policy was reloaded during the lookup")
		return nil
	case err != nil:
		return err
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "upstream addresses changed", slog.String("state", "discovered"),
		slog.Any("addresses", next))
	return nil
}
