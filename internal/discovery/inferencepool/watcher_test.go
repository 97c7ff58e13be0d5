package inferencepool

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

var (
	refA  = Ref{Namespace: "team-a", Name: "llama"}
	refB  = Ref{Namespace: "team-b", Name: "llama"}
	vllm  = map[string]string{"app": "vllm-llama"}
	other = map[string]string{"app": "other"}
)

func TestWatcherSteps(t *testing.T) {
	t.Parallel()
	type step struct {
		name string
		do   func(t *testing.T, c cluster) // nil: the first snapshot
		want map[Ref]Pool
	}
	tests := []struct {
		name  string
		refs  []Ref
		objs  []runtime.Object
		steps []step
	}{{
		name: "pods become ready, unready, deleted, relabelled",
		refs: []Ref{refA},
		objs: []runtime.Object{
			pool(t, refA, "app: vllm-llama", 8000),
			pod("team-a", "llama-0", "10.0.0.1", true, vllm),
			pod("team-a", "llama-1", "10.0.0.2", false, vllm),
			pod("team-a", "web-0", "10.0.0.9", true, other),
		},
		steps: []step{
			{name: "first snapshot", want: map[Ref]Pool{refA: found(
				Endpoint{"llama-0", "10.0.0.1", 8000})}},
			{name: "llama-1 ready", do: func(t *testing.T, c cluster) {
				c.editPodStatus(t, "team-a", "llama-1", setReady(true))
			}, want: map[Ref]Pool{refA: found(
				Endpoint{"llama-0", "10.0.0.1", 8000}, Endpoint{"llama-1", "10.0.0.2", 8000})}},
			{name: "llama-0 unready", do: func(t *testing.T, c cluster) {
				c.editPodStatus(t, "team-a", "llama-0", setReady(false))
			}, want: map[Ref]Pool{refA: found(Endpoint{"llama-1", "10.0.0.2", 8000})}},
			{name: "llama-1 terminating", do: func(t *testing.T, c cluster) {
				c.editPod(t, "team-a", "llama-1", setDeleting)
			}, want: map[Ref]Pool{refA: found()}},
			{name: "llama-1 deleted, llama-0 ready again", do: func(t *testing.T, c cluster) {
				c.deletePod(t, "team-a", "llama-1")
				c.editPodStatus(t, "team-a", "llama-0", setReady(true))
			}, want: map[Ref]Pool{refA: found(Endpoint{"llama-0", "10.0.0.1", 8000})}},
			{name: "llama-0 relabelled out", do: func(t *testing.T, c cluster) {
				c.editPod(t, "team-a", "llama-0", setLabels(other))
			}, want: map[Ref]Pool{refA: found()}},
			{name: "web-0 relabelled in", do: func(t *testing.T, c cluster) {
				c.editPod(t, "team-a", "web-0", setLabels(vllm))
			}, want: map[Ref]Pool{refA: found(Endpoint{"web-0", "10.0.0.9", 8000})}},
		},
	}, {
		name: "a ready pod without IP waits for one",
		refs: []Ref{refA},
		objs: []runtime.Object{pool(t, refA, "app: vllm-llama", 8000), pod("team-a", "llama-0", "", true, vllm)},
		steps: []step{
			{name: "first snapshot", want: map[Ref]Pool{refA: found()}},
			{name: "IP assigned", do: func(t *testing.T, c cluster) {
				c.editPodStatus(t, "team-a", "llama-0", setPodIP("fd00::7"))
			}, want: map[Ref]Pool{refA: found(Endpoint{"llama-0", "fd00::7", 8000})}},
		},
	}, {
		name: "pool created after start, then deleted",
		refs: []Ref{refA},
		objs: []runtime.Object{pod("team-a", "llama-0", "10.0.0.1", true, vllm)},
		steps: []step{
			{name: "first snapshot", want: map[Ref]Pool{refA: {}}},
			{name: "created", do: func(t *testing.T, c cluster) {
				c.createPool(t, pool(t, refA, "app: vllm-llama", 8000))
			}, want: map[Ref]Pool{refA: found(Endpoint{"llama-0", "10.0.0.1", 8000})}},
			{name: "deleted", do: func(t *testing.T, c cluster) { c.deletePool(t, refA) },
				want: map[Ref]Pool{refA: {}}},
		},
	}, {
		name: "selector change re-selects pods",
		refs: []Ref{refA},
		objs: []runtime.Object{
			pool(t, refA, "app: vllm-llama", 8000),
			pod("team-a", "llama-0", "10.0.0.1", true, vllm),
			pod("team-a", "web-0", "10.0.0.9", true, other),
		},
		steps: []step{
			{name: "first snapshot", want: map[Ref]Pool{refA: found(Endpoint{"llama-0", "10.0.0.1", 8000})}},
			{name: "selector app=other", do: func(t *testing.T, c cluster) {
				c.updatePool(t, pool(t, refA, "app: other", 8000))
			}, want: map[Ref]Pool{refA: found(Endpoint{"web-0", "10.0.0.9", 8000})}},
		},
	}, {
		name: "two target ports",
		refs: []Ref{refA},
		objs: []runtime.Object{
			pool(t, refA, "app: vllm-llama", 8001, 8000),
			pod("team-a", "llama-1", "10.0.0.2", true, vllm),
			pod("team-a", "llama-0", "10.0.0.1", true, vllm),
		},
		steps: []step{
			{name: "sorted by pod, then port", want: map[Ref]Pool{refA: found(
				Endpoint{"llama-0", "10.0.0.1", 8000}, Endpoint{"llama-0", "10.0.0.1", 8001},
				Endpoint{"llama-1", "10.0.0.2", 8000}, Endpoint{"llama-1", "10.0.0.2", 8001})}},
			{name: "ports changed", do: func(t *testing.T, c cluster) {
				c.updatePool(t, pool(t, refA, "app: vllm-llama", 9000))
			}, want: map[Ref]Pool{refA: found(
				Endpoint{"llama-0", "10.0.0.1", 9000}, Endpoint{"llama-1", "10.0.0.2", 9000})}},
		},
	}, {
		name: "namespaces isolated",
		refs: []Ref{refA, refB},
		objs: []runtime.Object{
			pool(t, refA, "app: vllm-llama", 8000),
			pool(t, refB, "app: vllm-llama", 8000),
			pod("team-a", "llama-0", "10.0.0.1", true, vllm),
			pod("team-b", "llama-0", "10.1.0.1", true, vllm),
		},
		steps: []step{
			{name: "first snapshot", want: map[Ref]Pool{
				refA: found(Endpoint{"llama-0", "10.0.0.1", 8000}),
				refB: found(Endpoint{"llama-0", "10.1.0.1", 8000}),
			}},
			{name: "a pod in team-b", do: func(t *testing.T, c cluster) {
				c.createPod(t, pod("team-b", "llama-1", "10.1.0.2", true, vllm))
			}, want: map[Ref]Pool{
				refA: found(Endpoint{"llama-0", "10.0.0.1", 8000}),
				refB: found(Endpoint{"llama-0", "10.1.0.1", 8000}, Endpoint{"llama-1", "10.1.0.2", 8000}),
			}},
			{name: "team-a's pool deleted", do: func(t *testing.T, c cluster) { c.deletePool(t, refA) },
				want: map[Ref]Pool{
					refA: {},
					refB: found(Endpoint{"llama-0", "10.1.0.1", 8000}, Endpoint{"llama-1", "10.1.0.2", 8000}),
				}},
		},
	}, {
		name: "a spec that cannot be used",
		refs: []Ref{refA},
		objs: []runtime.Object{pool(t, refA, "app: vllm-llama", 0), pod("team-a", "llama-0", "10.0.0.1", true, vllm)},
		steps: []step{
			{name: "port 0", want: map[Ref]Pool{refA: {Err: errors.New(
				"inferencepool: team-a/llama: spec.targetPorts[0].number: 0 out of range 1..65535")}}},
			{name: "fixed", do: func(t *testing.T, c cluster) {
				c.updatePool(t, pool(t, refA, "app: vllm-llama", 8000))
			}, want: map[Ref]Pool{refA: found(Endpoint{"llama-0", "10.0.0.1", 8000})}},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(tt.objs...)
			_, got := c.deliveries(t, tt.refs...)
			for i, st := range tt.steps {
				if st.do == nil {
					if s := next(t, got); !holds(s, st.want) {
						t.Fatalf("step %d (%s): first snapshot %v, want %v", i, st.name, s.pools, st.want)
					}
					continue
				}
				st.do(t, c)
				await(t, got, st.want)
			}
		})
	}
}

func TestWatcherSyncedAfterFirstSnapshot(t *testing.T) {
	t.Parallel()
	c := newCluster(pool(t, refA, "app: vllm-llama", 8000))
	w, got := c.deliveries(t, refA)
	s := next(t, got)
	<-w.Synced() // closed right after the first OnChange returns
	if !w.HasSynced() {
		t.Fatal("HasSynced() = false after Synced closed")
	}
	if p := s.Pool(refA); !p.Found {
		t.Fatalf("first snapshot Pool(%v) = %+v, want Found", refA, p)
	}
	if got := s.Refs(); len(got) != 1 || got[0] != refA {
		t.Fatalf("Refs() = %v, want [%v]", got, refA)
	}
}

// An update that changes no endpoint delivers nothing: the delivery after
// it is the next real change.
func TestWatcherDeduplicates(t *testing.T) {
	t.Parallel()
	c := newCluster(pool(t, refA, "app: vllm-llama", 8000),
		pod("team-a", "llama-0", "10.0.0.1", true, vllm), pod("team-a", "llama-1", "10.0.0.2", false, vllm))
	_, got := c.deliveries(t, refA)
	first := next(t, got)
	c.editPod(t, "team-a", "llama-0", func(p *unstructured.Unstructured) { p.SetAnnotations(map[string]string{"note": "x"}) })
	c.editPodStatus(t, "team-a", "llama-1", setReady(true))
	s := next(t, got)
	if s.Equal(first) {
		t.Fatalf("delivery after a no-op update = %v, the same as the first", s.pools)
	}
	want := found(Endpoint{"llama-0", "10.0.0.1", 8000}, Endpoint{"llama-1", "10.0.0.2", 8000})
	if p := s.Pool(refA); !p.equal(want) {
		t.Fatalf("Pool(%v) = %+v, want %+v", refA, p, want)
	}
}

func TestWatcherSetRefs(t *testing.T) {
	t.Parallel()
	c := newCluster(pool(t, refA, "app: vllm-llama", 8000), pool(t, refB, "app: vllm-llama", 8000),
		pod("team-a", "llama-0", "10.0.0.1", true, vllm), pod("team-b", "llama-0", "10.1.0.1", true, vllm))
	w, got := c.deliveries(t, refA)
	next(t, got)
	if err := w.SetRefs([]Ref{refB}); err != nil {
		t.Fatalf("SetRefs() = %v", err)
	}
	s := await(t, got, map[Ref]Pool{refB: found(Endpoint{"llama-0", "10.1.0.1", 8000})})
	if refs := s.Refs(); len(refs) != 1 || refs[0] != refB {
		t.Fatalf("Refs() = %v, want [%v]", refs, refB)
	}
	if err := w.SetRefs([]Ref{{Namespace: "team-a"}}); err == nil {
		t.Fatal("SetRefs(a ref without name) = nil, want an error")
	}
}

// Many goroutines change the refs while deliveries flow; OnChange never
// runs twice at once and the last SetRefs wins.
func TestWatcherConcurrentSetRefs(t *testing.T) {
	t.Parallel()
	c := newCluster(pool(t, refA, "app: vllm-llama", 8000), pool(t, refB, "app: vllm-llama", 8000),
		pod("team-a", "llama-0", "10.0.0.1", true, vllm), pod("team-b", "llama-0", "10.1.0.1", true, vllm))
	var inside, overlaps atomic.Int32
	got := make(chan Snapshot, 1)
	w, err := New(Options{Dynamic: c.dyn, Refs: []Ref{refA}, OnChange: func(s Snapshot) {
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		select { // keep only the newest; only this serialised callback sends
		case <-got:
		default:
		}
		got <- s
		inside.Add(-1)
	}})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				refs := []Ref{refA}
				if (i+j)%2 == 0 {
					refs = []Ref{refB, refA}
				}
				if err := w.SetRefs(refs); err != nil {
					t.Errorf("SetRefs() = %v", err)
				}
				w.HasSynced()
			}
		})
	}
	wg.Wait()
	if err := w.SetRefs([]Ref{refB}); err != nil {
		t.Fatalf("SetRefs() = %v", err)
	}
	waitFor(t, got, "only team-b/llama, found", func(s Snapshot) bool {
		r := s.Refs()
		return len(r) == 1 && r[0] == refB && s.Pool(refB).Found
	})
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("OnChange overlapped %d times, want never", n)
	}
}

func TestWatcherRunTwice(t *testing.T) {
	t.Parallel()
	w, got := newCluster().deliveries(t)
	next(t, got) // the first Run is under way
	if err := w.Run(t.Context()); err == nil {
		t.Fatal("second Run() = nil, want an error")
	}
}

func TestNewChecksOptions(t *testing.T) {
	t.Parallel()
	c := newCluster()
	ok := Options{Dynamic: c.dyn, OnChange: func(Snapshot) {}}
	tests := []struct {
		name string
		edit func(*Options)
		want []string // each must appear in the error
	}{
		{name: "valid", edit: func(*Options) {}},
		{name: "nothing set", edit: func(o *Options) { *o = Options{} },
			want: []string{"Dynamic: required", "OnChange: required"}},
		{name: "negative resync", edit: func(o *Options) { o.resync = -1 }, want: []string{"Resync: -1ns is negative"}},
		{name: "bad refs", edit: func(o *Options) { o.Refs = []Ref{refA, {Name: "x"}, {Namespace: "y"}} },
			want: []string{"Refs[1].Namespace: empty", "Refs[2].Name: empty"}},
	}
	for _, tt := range tests {
		o := ok
		tt.edit(&o)
		_, err := New(o)
		if len(tt.want) == 0 && err != nil {
			t.Errorf("%s: New() = %v, want nil", tt.name, err)
		}
		if len(tt.want) > 0 && err == nil {
			t.Errorf("%s: New() = nil, want an error", tt.name)
		}
		for _, w := range tt.want {
			if err != nil && !strings.Contains(err.Error(), w) {
				t.Errorf("%s: New() = %v, want it to contain %q", tt.name, err, w)
			}
		}
	}
}
