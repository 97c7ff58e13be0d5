package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/discovery"
	"github.com/gatekeeper-dev/gatekeeper/internal/discovery/inferencepool"
)

// Discover re-resolves the discovery hosts every interval (the shortest
// dns_interval of the policy) and applies a changed address set at once,
// until ctx ends.
func (k *Keeper) Discover(ctx context.Context) {
	for {
		interval := time.Duration(0)
		for _, u := range k.raw.Load().Upstreams {
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
		if err := k.Rediscover(ctx); err != nil {
			k.o.Log.LogAttrs(ctx, slog.LevelError, "discovered upstreams not applied", slog.String("err", err.Error()))
		}
	}
}

// Rediscover resolves now and applies the policy again if addresses changed.
func (k *Keeper) Rediscover(ctx context.Context) error {
	raw := k.raw.Load()
	if len(discovery.Hosts(raw)) == 0 {
		return nil
	}
	k.mu.Lock()
	prev := k.resolved
	k.mu.Unlock()
	next := k.Resolve(ctx, raw)
	if prev.Equal(next) {
		return nil
	}
	err := k.Commit(raw, next, raw)
	switch {
	case errors.Is(err, errPolicyMoved):
		k.o.Log.LogAttrs(ctx, slog.LevelDebug, "discovery round dropped: the policy was reloaded during the lookup")
		return nil
	case err != nil:
		return err
	}
	k.o.Log.LogAttrs(ctx, slog.LevelInfo, "upstream addresses changed", slog.String("state", "discovered"),
		slog.Any("addresses", next))
	return nil
}

// poolWatch is the running InferencePool watch.
type poolWatch struct {
	w    *inferencepool.Watcher
	stop context.CancelFunc
	done chan struct{}
}

// WatchPools starts, updates or stops the InferencePool watch for the
// pools the running policy names: at start (the watch, and the one a later
// reload starts, run under ctx) and after every reload.
func (k *Keeper) WatchPools(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.loops = ctx
	refs := discovery.PoolRefs(k.raw.Load(), k.ownNS)
	pw := k.poolWatch
	switch {
	case pw != nil:
		return pw.w.SetRefs(toRefs(refs)) // none: it watches nothing
	case len(refs) == 0:
		return nil
	case k.o.NewPoolWatcher == nil:
		return fmt.Errorf("gatekeeper: inference_pool: no Kubernetes client")
	}
	w, err := k.o.NewPoolWatcher(toRefs(refs), k.poolsChanged)
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	pw = &poolWatch{w: w, stop: stop, done: make(chan struct{})}
	k.poolWatch = pw
	go func() { // owned: StopPools cancels it and waits for done
		defer close(pw.done)
		if err := w.Run(wctx); err != nil && !errors.Is(err, context.Canceled) {
			k.o.Log.LogAttrs(wctx, slog.LevelError, "InferencePool watch stopped", slog.String("err", err.Error()))
		}
	}()
	return nil
}

// StopPools ends the watch and waits for it (shutdown).
func (k *Keeper) StopPools() {
	k.mu.Lock()
	pw := k.poolWatch
	k.mu.Unlock()
	if pw != nil {
		pw.stop()
		<-pw.done
	}
}

// poolsChanged applies a snapshot of the watched pools: a pool the watch
// cannot answer for keeps the endpoints it had (a lost watch must not empty
// it), a found one takes its ready pods. The policy is committed again
// when that changes the upstreams.
func (k *Keeper) poolsChanged(s inferencepool.Snapshot) {
	k.mu.Lock()
	next := discovery.Pools{}
	for _, ref := range s.Refs() {
		key := config.InferencePool{Name: ref.Name, Namespace: ref.Namespace}
		p := s.Pool(ref)
		switch {
		case p.Found:
			eps := make([]string, len(p.Endpoints))
			for i, e := range p.Endpoints {
				eps[i] = e.Addr()
			}
			next[key] = eps
		case p.Err != nil:
			k.o.Log.LogAttrs(context.Background(), slog.LevelWarn, "InferencePool cannot be used; keeping its last endpoints",
				slog.String("pool", ref.String()), slog.String("err", p.Err.Error()))
			fallthrough
		default:
			if old, ok := k.pools[key]; ok {
				next[key] = old
			}
		}
	}
	changed := !next.Equal(k.pools)
	k.pools = next
	r := k.resolved
	k.mu.Unlock()
	if !changed {
		return
	}
	raw := k.raw.Load()
	err := k.Commit(raw, r, raw)
	switch {
	case errors.Is(err, errPolicyMoved): // the reload re-expands with k.pools
	case err != nil:
		k.o.Log.LogAttrs(context.Background(), slog.LevelError, "InferencePool endpoints not applied", slog.String("err", err.Error()))
	default:
		k.o.Log.LogAttrs(context.Background(), slog.LevelInfo, "upstream addresses changed", slog.String("state", "inference_pool"),
			slog.Any("endpoints", next))
		k.step("pools")
	}
}

func toRefs(ps []config.InferencePool) []inferencepool.Ref {
	out := make([]inferencepool.Ref, len(ps))
	for i, p := range ps {
		out[i] = inferencepool.Ref{Namespace: p.Namespace, Name: p.Name}
	}
	return out
}
