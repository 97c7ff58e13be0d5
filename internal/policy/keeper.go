package policy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/discovery"
	"github.com/gatekeeper-dev/gatekeeper/internal/discovery/inferencepool"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// Options are a Keeper's inputs.
type Options struct {
	// Path is the policy file Reload reads; "" runs the embedded default
	// and Reload does nothing.
	Path string
	// NVML is pressure.NVMLCompiled: without it a policy naming an nvml
	// source is refused (LoadRunnable).
	NVML bool
	// Log receives the reload, discovery and InferencePool lines. Nil
	// means discard.
	Log *slog.Logger
	// Level, if set, takes each applied policy's log.level.
	Level *slog.LevelVar
	// Lookup resolves the discovery hosts. Nil means the system resolver.
	Lookup discovery.Lookup
	// Namespace is gatekeeper's own namespace, for pools that name none.
	// "": the service account's namespace file, or $POD_NAMESPACE.
	Namespace string
	// Sources is the pressure sources' HTTP client. Nil means the
	// pressure package's own.
	Sources *http.Client
	// Pressure runs the pressure Monitor each policy's sources need.
	// Required.
	Pressure *pressure.Runner
	// Registerer receives the reload series. Nil: not registered.
	Registerer prometheus.Registerer
	// NewPoolWatcher builds the InferencePool watch the first time a
	// policy names a pool (the Kubernetes clients are the caller's).
	NewPoolWatcher func(refs []inferencepool.Ref, onChange func(inferencepool.Snapshot)) (*inferencepool.Watcher, error)
	// Step, if set, hears "reloaded", "reload_refused" and "pools" as they
	// happen (tests).
	Step func(name string)
}

// QuotaLimits is what takes the policy's token quotas: *quota.Quotas, or
// *cluster.Quotas over every replica.
type QuotaLimits interface {
	SetLimits(quota.Limits) error
}

// Targets are the running packages a Plan changes. Every field but Gate
// and Shares (nil without a cluster section) is required.
type Targets struct {
	Limiter    *breaker.Limiter
	Gate       *cluster.Gate
	Classes    *breaker.LimiterSet
	Models     *breaker.LimiterSet
	Quotas     QuotaLimits
	Queue      *queue.Queue
	Controller *control.Controller
	Core       *decide.Core
	Windows    *cluster.Windows
	Shares     *cluster.Cluster
	// Router, if set, is the pod scorer (Plan.NewRouter): each Plan sets its
	// weights and makes it the queue's scorer while scoring runs.
	Router *route.Router
	// SetPods replaces the registry's pods with s's; it returns the names
	// removed, whose windows the Plan drops.
	SetPods func(s Settings) (removed []string)
}

// Keeper holds the running policy and is the one path by which a policy
// takes effect (Commit). Create one with New, hand it the running packages
// with Bind, then apply the first Plan. Safe for concurrent use; must not
// be copied.
type Keeper struct {
	o       Options
	t       Targets // set once by Bind, before anything runs
	metrics metrics
	raw     atomic.Pointer[config.Config] // the policy as written
	current atomic.Pointer[config.Config] // raw with discovery expanded
	token   atomic.Pointer[string]
	reloads int // numbers the applied reloads; touched only by Reload's goroutine
	file    fileWatch

	// commitMu serialises Commit: a Plan is applied to the state it was
	// prepared against.
	commitMu sync.Mutex

	// mu guards the fields below.
	mu        sync.Mutex
	resolved  discovery.Resolved
	pools     discovery.Pools // each watched InferencePool's endpoints
	poolWatch *poolWatch      // nil until the policy names a pool
	ownNS     string          // gatekeeper's namespace, for pools that name none
	loops     context.Context // WatchPools's, for the watch a reload starts; nil before
}

// New returns a Keeper with no policy yet.
func New(o Options) *Keeper {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Lookup == nil {
		o.Lookup = (&net.Resolver{}).LookupHost
	}
	return &Keeper{o: o, metrics: newMetrics(o.Registerer)}
}

// Bind hands the Keeper the running packages a Plan changes. Call it once,
// before the first Apply.
func (k *Keeper) Bind(t Targets) { k.t = t }

// Config returns the running policy, its discovered upstreams expanded;
// nil before the first Apply.
func (k *Keeper) Config() *config.Config { return k.current.Load() }

// Raw returns the running policy as written.
func (k *Keeper) Raw() *config.Config { return k.raw.Load() }

// Token is the admin bearer token now (server.admin_token_file); "" for
// none.
func (k *Keeper) Token() string {
	if t := k.token.Load(); t != nil {
		return *t
	}
	return ""
}

// Resolve looks raw's discovery hosts up now, keeping the last addresses
// of a host that does not answer.
func (k *Keeper) Resolve(ctx context.Context, raw *config.Config) discovery.Resolved {
	k.mu.Lock()
	prev := k.resolved
	k.mu.Unlock()
	return discovery.Resolve(ctx, k.o.Lookup, discovery.Hosts(raw), prev)
}

// ErrPolicyMoved: a discovery round resolved for a policy that a reload
// replaced meanwhile; its result is dropped (the next round uses the new one).
var errPolicyMoved = errors.New("gatekeeper: the policy changed during the lookup")

// Commit is the one path by which a policy takes effect (start, reload,
// SIGHUP, discovery round): raw with its discovery upstreams expanded to r
// is prepared and checked whole, then applied in one step that cannot
// fail; on error nothing running has changed. basis, when not nil, is the
// policy a discovery round resolved for: if a reload has replaced it
// since, ErrPolicyMoved and nothing changes, so a round never applies an
// older policy than the running one.
func (k *Keeper) Commit(raw *config.Config, r discovery.Resolved, basis *config.Config) error {
	k.commitMu.Lock()
	defer k.commitMu.Unlock()
	if basis != nil && k.raw.Load() != basis {
		return errPolicyMoved
	}
	p, err := k.Prepare(raw, r)
	if err != nil {
		return err
	}
	p.Apply()
	return nil
}

// Set resolves raw's discovery hosts and commits it: a reload. Listener
// addresses need a restart; everything else takes effect for new requests
// at once, and work already admitted is never cancelled.
func (k *Keeper) Set(raw *config.Config) error {
	if err := k.Commit(raw, k.Resolve(context.Background(), raw), nil); err != nil {
		return err
	}
	k.mu.Lock()
	ctx := k.loops
	k.mu.Unlock()
	if ctx != nil { // the pools the new policy names
		if err := k.WatchPools(ctx); err != nil {
			k.o.Log.LogAttrs(ctx, slog.LevelError, "InferencePool watch not updated", slog.String("err", err.Error()))
		}
	}
	return nil
}

func (k *Keeper) step(name string) {
	if k.o.Step != nil {
		k.o.Step(name)
	}
}
