package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"k8s.io/client-go/dynamic"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/discovery"
	"github.com/gatekeeper-dev/gatekeeper/internal/discovery/inferencepool"
)

// kubeClients are the clients the InferencePool watch reads through: one
// dynamic client, for the pools and their pods alike.
type kubeClients struct {
	dynamic dynamic.Interface
}

// poolWatch is the running InferencePool watch.
type poolWatch struct {
	w    *inferencepool.Watcher
	stop context.CancelFunc
	done chan struct{}
}

// ownNamespace is gatekeeper's namespace when the policy names a pool
// without one; "" when it needs none. given (tests) wins.
func ownNamespace(c *config.Config, given string) (string, error) {
	if given != "" {
		return given, nil
	}
	for _, u := range c.Upstreams {
		if u.InferencePool != nil && u.InferencePool.Namespace == "" {
			ns, err := inferencepool.OwnNamespace()
			if err != nil {
				return "", fmt.Errorf("gatekeeper: upstreams[%s].inference_pool.namespace is empty and gatekeeper's own namespace is unknown "+
					"(not in a pod, and $POD_NAMESPACE unset): %w", u.Name, err)
			}
			return ns, nil
		}
	}
	return "", nil
}

// expand is the running policy for raw: its DNS upstreams expanded to r,
// its InferencePool upstreams to the pools' ready pods. The caller holds
// a.mu or is newApp.
func (a *app) expand(raw *config.Config, r discovery.Resolved, ns string) *config.Config {
	return discovery.ExpandPools(discovery.Expand(raw, r), a.pools, ns)
}

// watchPools starts, updates or stops the InferencePool watch for the
// pools the running policy names (at start and after every reload).
func (a *app) watchPools(ctx context.Context) error {
	refs := discovery.PoolRefs(a.raw.Load(), a.ownNS)
	a.mu.Lock()
	defer a.mu.Unlock()
	pw := a.poolWatch
	switch {
	case pw != nil:
		return pw.w.SetRefs(toRefs(refs)) // none: it watches nothing
	case len(refs) == 0:
		return nil
	}
	clients := a.opts.kube
	if clients == nil {
		dyn, err := inferencepool.ClientsFromConfig(os.Getenv("KUBECONFIG"))
		if err != nil {
			return fmt.Errorf("gatekeeper: inference_pool: the Kubernetes API: %w", err)
		}
		clients = &kubeClients{dynamic: dyn}
	}
	w, err := inferencepool.New(inferencepool.Options{Dynamic: clients.dynamic, Refs: toRefs(refs),
		OnChange: a.poolsChanged, Logger: a.log})
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	pw = &poolWatch{w: w, stop: stop, done: make(chan struct{})}
	a.poolWatch = pw
	go func() {
		defer close(pw.done)
		if err := w.Run(wctx); err != nil && !errors.Is(err, context.Canceled) {
			a.log.LogAttrs(wctx, slog.LevelError, "InferencePool watch stopped", slog.String("err", err.Error()))
		}
	}()
	return nil
}

// stopPools ends the watch (shutdown).
func (a *app) stopPools() {
	a.mu.Lock()
	pw := a.poolWatch
	a.mu.Unlock()
	if pw != nil {
		pw.stop()
		<-pw.done
	}
}

// poolsChanged applies a snapshot of the watched pools: a pool the watch
// cannot answer for keeps the endpoints it had (a lost watch must not empty
// it), a found one takes its ready pods. The policy is committed again
// when that changes the upstreams.
func (a *app) poolsChanged(s inferencepool.Snapshot) {
	a.mu.Lock()
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
			a.log.LogAttrs(context.Background(), slog.LevelWarn, "InferencePool cannot be used; keeping its last endpoints",
				slog.String("pool", ref.String()), slog.String("err", p.Err.Error()))
			fallthrough
		default:
			if old, ok := a.pools[key]; ok {
				next[key] = old
			}
		}
	}
	changed := !next.Equal(a.pools)
	a.pools = next
	r := a.resolved
	a.mu.Unlock()
	if !changed {
		return
	}
	raw := a.raw.Load()
	err := a.commit(raw, r, raw)
	switch {
	case errors.Is(err, errPolicyMoved): // the reload re-expands with a.pools
	case err != nil:
		a.log.LogAttrs(context.Background(), slog.LevelError, "InferencePool endpoints not applied", slog.String("err", err.Error()))
	default:
		a.log.LogAttrs(context.Background(), slog.LevelInfo, "upstream addresses changed", slog.String("state", "inference_pool"),
			slog.Any("endpoints", next))
		a.step("pools")
	}
}

func toRefs(ps []config.InferencePool) []inferencepool.Ref {
	out := make([]inferencepool.Ref, len(ps))
	for i, p := range ps {
		out[i] = inferencepool.Ref{Namespace: p.Namespace, Name: p.Name}
	}
	return out
}
