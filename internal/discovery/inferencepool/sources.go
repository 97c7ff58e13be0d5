package inferencepool

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// source is one running informer: a pool's, or a namespace's pods'.
type source struct {
	informer cache.SharedIndexInformer
	synced   cache.DoneChecker // our handler has seen the initial list
	stop     context.CancelFunc
}

// ready reports whether the source's cache holds a complete list.
func (s *source) ready() bool { return s != nil && cache.IsDone(s.synced) }

// sources holds an informer per watched pool, filtered to its name (so a
// Role may name the pools in resourceNames), and one pod informer per
// namespace holding a watched pool. Only Run's goroutine uses it.
type sources struct {
	w     *Watcher
	wg    *sync.WaitGroup // Run waits on every informer goroutine
	pools map[Ref]*source
	pods  map[string]*source
}

func newSources(w *Watcher, wg *sync.WaitGroup) *sources {
	return &sources{w: w, wg: wg, pools: map[Ref]*source{}, pods: map[string]*source{}}
}

// reconcile starts the informers refs need and stops the others. A stopped
// informer's goroutines finish on their own; Run waits for them at its end.
func (ss *sources) reconcile(ctx context.Context, refs []Ref) error {
	wantPool := make(map[Ref]bool, len(refs))
	wantNS := make(map[string]bool, len(refs))
	for _, r := range refs {
		wantPool[r], wantNS[r.Namespace] = true, true
	}
	for r, s := range ss.pools {
		if !wantPool[r] {
			s.stop()
			delete(ss.pools, r)
		}
	}
	for ns, s := range ss.pods {
		if !wantNS[ns] {
			s.stop()
			delete(ss.pods, ns)
		}
	}
	for r := range wantPool {
		if ss.pools[r] != nil {
			continue
		}
		s, err := ss.start(ctx, ss.poolInformer(r), nil)
		if err != nil {
			return fmt.Errorf("inferencepool: watch %s: %w", r, err)
		}
		ss.pools[r] = s
	}
	for ns := range wantNS {
		if ss.pods[ns] != nil {
			continue
		}
		s, err := ss.start(ctx, ss.informer(podResource, ns, nil), slimPod)
		if err != nil {
			return fmt.Errorf("inferencepool: watch pods in %s: %w", ns, err)
		}
		ss.pods[ns] = s
	}
	return nil
}

func (ss *sources) poolInformer(r Ref) cache.SharedIndexInformer {
	return ss.informer(poolResource, r.Namespace, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", r.Name).String()
	})
}

// informer lists and watches gvr in namespace ns through the dynamic
// client, as unstructured objects; narrow, if not nil, edits the options
// of every list and watch. It is what dynamicinformer builds, without that
// package's factory (and the typed informers it imports).
func (ss *sources) informer(gvr schema.GroupVersionResource, ns string, narrow func(*metav1.ListOptions)) cache.SharedIndexInformer {
	res := ss.w.dyn.Resource(gvr).Namespace(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if narrow != nil {
				narrow(&o)
			}
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if narrow != nil {
				narrow(&o)
			}
			return res.Watch(ctx, o)
		},
	}
	// The wrapper tells the reflector when the client cannot stream a
	// watch list (the fake cannot), so it lists instead.
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, ss.w.dyn),
		&unstructured.Unstructured{}, cache.SharedIndexInformerOptions{ResyncPeriod: ss.w.resync, ObjectDescription: gvr.String()})
}

// start runs inf until ctx ends or the source is stopped; every event, and
// the end of the initial list, pokes Run's loop to recompute.
func (ss *sources) start(ctx context.Context, inf cache.SharedIndexInformer, transform cache.TransformFunc) (*source, error) {
	if transform != nil {
		if err := inf.SetTransform(transform); err != nil {
			return nil, err
		}
	}
	if err := inf.SetWatchErrorHandlerWithContext(ss.w.watchFailed); err != nil {
		return nil, err
	}
	poke := func(any) { ss.w.poke() }
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, obj any) { poke(obj) },
		DeleteFunc: poke,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	synced := reg.HasSyncedChecker()
	ss.wg.Go(func() { inf.RunWithContext(ctx) })
	ss.wg.Go(func() {
		select {
		case <-synced.Done():
			ss.w.poke() // an empty list delivers no event, so say so here
		case <-ctx.Done():
		}
	})
	return &source{informer: inf, synced: synced, stop: cancel}, nil
}

// snapshot reads every ref's state from the caches.
func (ss *sources) snapshot(refs []Ref) Snapshot {
	pods := map[string][]*unstructured.Unstructured{}
	out := make(map[Ref]Pool, len(refs))
	for _, r := range refs {
		ps, podSrc := ss.pools[r], ss.pods[r.Namespace]
		if !ps.ready() || !podSrc.ready() {
			out[r] = Pool{} // a half-read pool must not look empty
			continue
		}
		obj, ok, err := ps.informer.GetStore().GetByKey(r.String())
		u, isPool := obj.(*unstructured.Unstructured)
		if err != nil || !ok || !isPool {
			out[r] = Pool{}
			continue
		}
		sp, err := parseSpec(u)
		if err != nil {
			out[r] = Pool{Err: err}
			continue
		}
		if _, listed := pods[r.Namespace]; !listed {
			pods[r.Namespace] = listPods(podSrc)
		}
		out[r] = Pool{Found: true, Endpoints: sp.endpoints(pods[r.Namespace])}
	}
	return Snapshot{pools: out}
}

func listPods(s *source) []*unstructured.Unstructured {
	objs := s.informer.GetStore().List()
	pods := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*unstructured.Unstructured); ok {
			pods = append(pods, p)
		}
	}
	return pods
}

// ready reports whether every source has read its initial list.
func (ss *sources) ready() bool {
	for _, s := range ss.pools {
		if !s.ready() {
			return false
		}
	}
	for _, s := range ss.pods {
		if !s.ready() {
			return false
		}
	}
	return true
}
