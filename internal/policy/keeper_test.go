package policy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// rig is a Keeper bound to real packages built from its first Plan, as
// cmd/gatekeeper builds them.
type rig struct {
	k      *Keeper
	queue  *queue.Queue
	router *route.Router
	pods   []string // the names SetPods was last handed
}

func newRig(t *testing.T, policy string, lookup func(context.Context, string) ([]string, error)) *rig {
	t.Helper()
	r := &rig{}
	r.k = New(Options{Pressure: pressure.NewRunner(pressure.RunnerSettings{}), Lookup: lookup, Registerer: prometheus.NewRegistry()})
	raw := mustParse(t, policy)
	first, err := r.k.Prepare(raw, r.k.Resolve(t.Context(), raw))
	if err != nil {
		t.Fatal(err)
	}
	s := first.Settings()
	tg := Targets{Classes: &breaker.LimiterSet{}, Models: &breaker.LimiterSet{}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var q *quota.Quotas
	tg.Limiter, err = breaker.NewLimiter(s.Limiter)
	must(err)
	r.queue, err = queue.New(s.Queue)
	must(err)
	q, err = quota.New(quota.Settings{})
	must(err)
	tg.Controller, err = control.New(first.Control())
	must(err)
	reg := pods.New(tg.Controller)
	tg.Core, err = decide.New(decide.Options{Registry: reg, Admission: decide.Queue(r.queue), Limiter: tg.Limiter, Quotas: q})
	must(err)
	r.router, err = first.NewRouter()
	must(err)
	tg.Queue, tg.Quotas, tg.Windows, tg.Router = r.queue, q, cluster.NewWindows(cluster.WindowsSettings{Queue: r.queue}), r.router
	tg.SetPods = func(s Settings) []string {
		var ps []pods.Pod
		r.pods = r.pods[:0]
		for _, u := range s.Upstreams {
			ps = append(ps, pods.Pod{Name: u.Name, URL: u.URL})
			r.pods = append(r.pods, u.Name)
		}
		return reg.Set(ps)
	}
	r.k.Bind(tg)
	first.Apply()
	return r
}

func mustParse(t *testing.T, policy string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (r *rig) windows() map[string]int {
	out := map[string]int{}
	for _, w := range r.queue.Stats().Windows {
		out[w.Name] = w.Limit
	}
	return out
}

// TestPrepareChangesNothingApplySwaps: Prepare of a policy that a package
// refuses late (an unknown source kind, past config's checks) fails and
// changes nothing that runs; a good Plan's Apply swaps every package.
func TestPrepareChangesNothingApplySwaps(t *testing.T) {
	r := newRig(t, "upstreams: [{name: a, url: 'http://127.0.0.1:1', max_inflight: 4}]\n", nil)
	before := r.k.Config()
	if got := r.windows(); len(got) != 1 || got["a"] != 4 {
		t.Fatalf("windows after the first Plan = %v, want a at 4", got)
	}
	bad := mustParse(t, "upstreams: [{name: a, url: 'http://127.0.0.1:1'}, {name: b, url: 'http://127.0.0.1:2'}]\n")
	bad.Upstreams[1].Sources = []config.Source{{Kind: "bogus", URL: "http://127.0.0.1:2/x", Name: "bogus"}}
	if _, err := r.k.Prepare(bad, nil); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("Prepare(bad) = %v, want the pressure monitor's refusal", err)
	}
	if err := r.k.Set(bad); err == nil {
		t.Fatal("Set(bad) = nil, want the refusal")
	}
	if r.k.Config() != before || len(r.windows()) != 1 || len(r.pods) != 1 {
		t.Fatalf("after a refused policy: config changed %v, windows %v, pods %v; want nothing changed", r.k.Config() != before, r.windows(), r.pods)
	}
	good := mustParse(t, "upstreams: [{name: b, url: 'http://127.0.0.1:2', max_inflight: 6}]\n")
	p, err := r.k.Prepare(good, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.k.Config() != before {
		t.Fatal("Prepare changed the running policy")
	}
	p.Apply()
	if got := r.windows(); r.k.Config() != p.Config() || len(got) != 1 || got["b"] != 6 || len(r.pods) != 1 || r.pods[0] != "b" {
		t.Errorf("after Apply: windows %v, pods %v; want b alone at 6 (a's window dropped)", got, r.pods)
	}
}

// TestCommitRefusesAMovedBasis: a round prepared for a policy that was
// replaced since applies nothing.
func TestCommitRefusesAMovedBasis(t *testing.T) {
	r := newRig(t, "upstreams: [{name: a, url: 'http://127.0.0.1:1'}]\n", nil)
	old := r.k.Raw()
	if err := r.k.Set(mustParse(t, "upstreams: [{name: a, url: 'http://127.0.0.1:1'}]\nfast_breaker: {qps: 99, burst: 5}\n")); err != nil {
		t.Fatal(err)
	}
	if err := r.k.Commit(old, nil, old); !errors.Is(err, errPolicyMoved) {
		t.Fatalf("Commit(basis replaced) = %v, want ErrPolicyMoved", err)
	}
	if got := r.k.Config().FastBreaker.QPS; got != 99 {
		t.Errorf("qps after the dropped round = %v, want 99", got)
	}
}

// TestRediscoverExpands: a DNS upstream becomes one pod per address, and a
// round that finds another address applies it.
func TestRediscoverExpands(t *testing.T) {
	addrs := []string{"127.0.0.1"}
	lookup := func(context.Context, string) ([]string, error) { return append([]string(nil), addrs...), nil }
	r := newRig(t, "upstreams: [{name: pods, url: 'http://pods.test:8000', dns_interval: 1h}]\n", lookup)
	if n := len(r.k.Config().Upstreams); n != 1 {
		t.Fatalf("%d upstreams at start, want 1", n)
	}
	addrs = append(addrs, "127.0.0.2")
	if err := r.k.Rediscover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(r.k.Config().Upstreams); n != 2 || len(r.windows()) != 2 {
		t.Errorf("after the round: %d upstreams, windows %v; want 2 and 2", n, r.windows())
	}
}
