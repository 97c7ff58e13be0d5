package inferencepool

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"
)

// poolDoc is an InferencePool as `kubectl get -o yaml` prints it, with the
// fields the watcher ignores (endpointPickerRef, status) left in.
const poolDoc = `apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata:
  name: %s
  namespace: %s
  uid: 7d7c3c6e-0f4e-4a36-9d8e-3f4b2c1a0b9e
  generation: 1
  creationTimestamp: "2026-01-05T10:00:00Z"
spec:
  selector:
    matchLabels:
      %s
  targetPorts:
%s  appProtocol: http
  endpointPickerRef:
    name: vllm-epp
    kind: Service
    port:
      number: 9002
    failureMode: FailClose
status:
  parents:
  - parentRef:
      group: gateway.networking.k8s.io
      kind: Gateway
      name: inference-gateway
    conditions:
    - type: Accepted
      status: "True"
      reason: Accepted
      lastTransitionTime: "2026-01-05T10:00:01Z"
`

// pool returns an InferencePool decoded from YAML, as the API server hands
// it to a dynamic client; selector is one "key: value" line.
func pool(t *testing.T, r Ref, selector string, ports ...int) *unstructured.Unstructured {
	t.Helper()
	return decodePool(t, poolYAML(r, selector, ports...))
}

// poolYAML renders poolDoc; no ports leaves targetPorts null.
func poolYAML(r Ref, selector string, ports ...int) string {
	var tp strings.Builder
	for _, p := range ports {
		fmt.Fprintf(&tp, "  - number: %d\n", p)
	}
	return fmt.Sprintf(poolDoc, r.Name, r.Namespace, selector, tp.String())
}

func decodePool(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("YAMLToJSON: %v", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatalf("UnmarshalJSON: %v", err)
	}
	return u
}

// pod returns a pod of the vllm model server as the API server hands it
// to a dynamic client (less what it sets itself: resourceVersion, and the
// uid a real server would generate); ip "" means not yet assigned.
func pod(ns, name, ip string, ready bool, labels map[string]string) *unstructured.Unstructured {
	status := "False"
	if ready {
		status = "True"
	}
	ls := map[string]any{}
	for k, v := range labels {
		ls[k] = v
	}
	st := map[string]any{
		"phase": "Running",
		"conditions": []any{
			map[string]any{"type": "PodScheduled", "status": "True"},
			map[string]any{"type": "ContainersReady", "status": status},
			map[string]any{"type": "Ready", "status": status},
		},
	}
	if ip != "" {
		st["podIP"] = ip
		st["podIPs"] = []any{map[string]any{"ip": ip}}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name": name, "namespace": ns, "labels": ls,
			"uid": "uid-" + ns + "-" + name, "creationTimestamp": "2026-01-05T10:00:00Z",
		},
		"spec": map[string]any{
			"containers": []any{map[string]any{"name": "vllm", "image": "vllm/vllm-openai:latest"}},
		},
		"status": st,
	}}
}

// deletedAt is the deletionTimestamp the tests give a terminating pod.
const deletedAt = "2026-01-05T11:00:00Z"

// cluster is a fake API server the watcher reads and a test writes to.
//
// Unlike an API server, the fake cannot replay to a watch what was deleted
// between an informer's list and its watch: a watch from the list's
// resourceVersion gets the objects still stored that changed since, never
// their deletions. On a busy machine the reflector's watch may come well
// after its list, so deliveries returns only once every informer watches
// (issue 35: a pool deleted in that gap was never seen).
type cluster struct {
	dyn     *dynfake.FakeDynamicClient
	watches *watches
}

func newCluster(objs ...runtime.Object) cluster {
	kinds := map[schema.GroupVersionResource]string{poolResource: "InferencePoolList", podResource: "PodList"}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, objs...)
	c := cluster{dyn: dyn, watches: &watches{n: map[watchKey]int{}, changed: make(chan struct{})}}
	// The fake's own watch reaction, counted once the tracker has
	// registered the watch: a write after the count reaches it.
	dyn.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := dyn.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		c.watches.opened(watchKey{a.GetResource(), a.GetNamespace()})
		return true, w, nil
	})
	return c
}

// watchKey is what a watch watches: a resource in a namespace.
type watchKey struct {
	gvr schema.GroupVersionResource
	ns  string
}

// watches counts the watches the fake has opened.
type watches struct {
	mu      sync.Mutex // guards the fields below
	n       map[watchKey]int
	changed chan struct{} // closed, and replaced, at every new watch
}

func (w *watches) opened(k watchKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n[k]++
	close(w.changed)
	w.changed = make(chan struct{})
}

// waitWatching waits until the watcher watches every pool in refs and the
// pods of their namespaces.
func (c cluster) waitWatching(t *testing.T, refs ...Ref) {
	t.Helper()
	want := map[watchKey]int{}
	seen := map[Ref]bool{}
	for _, r := range refs {
		if !seen[r] {
			seen[r] = true
			want[watchKey{poolResource, r.Namespace}]++ // one informer per pool
			want[watchKey{podResource, r.Namespace}] = 1
		}
	}
	timeout := time.After(waitTimeout)
	for {
		c.watches.mu.Lock()
		missing := 0
		for k, n := range want {
			if c.watches.n[k] < n {
				missing++
			}
		}
		changed := c.watches.changed
		c.watches.mu.Unlock()
		if missing == 0 {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the watcher did not open its %d watches (%v) within %v", len(want), want, waitTimeout)
		}
	}
}

func (c cluster) createPool(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	if _, err := c.dyn.Resource(poolResource).Namespace(u.GetNamespace()).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pool: %v", err)
	}
}

func (c cluster) updatePool(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	if _, err := c.dyn.Resource(poolResource).Namespace(u.GetNamespace()).Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pool: %v", err)
	}
}

func (c cluster) deletePool(t *testing.T, r Ref) {
	t.Helper()
	if err := c.dyn.Resource(poolResource).Namespace(r.Namespace).Delete(t.Context(), r.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pool: %v", err)
	}
}

func (c cluster) createPod(t *testing.T, p *unstructured.Unstructured) {
	t.Helper()
	if _, err := c.dyn.Resource(podResource).Namespace(p.GetNamespace()).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
}

// editPod reads a pod, lets edit change its metadata or spec and writes it
// back.
func (c cluster) editPod(t *testing.T, ns, name string, edit func(*unstructured.Unstructured)) {
	t.Helper()
	pods, p := c.getPod(t, ns, name)
	edit(p)
	if _, err := pods.Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pod: %v", err)
	}
}

// editPodStatus reads a pod, lets edit change its status and writes it
// back through the status subresource, as the kubelet does.
func (c cluster) editPodStatus(t *testing.T, ns, name string, edit func(*unstructured.Unstructured)) {
	t.Helper()
	pods, p := c.getPod(t, ns, name)
	edit(p)
	if _, err := pods.UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pod status: %v", err)
	}
}

func (c cluster) getPod(t *testing.T, ns, name string) (dynamic.ResourceInterface, *unstructured.Unstructured) {
	t.Helper()
	pods := c.dyn.Resource(podResource).Namespace(ns)
	p, err := pods.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod: %v", err)
	}
	return pods, p
}

func (c cluster) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := c.dyn.Resource(podResource).Namespace(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
}

// setReady sets the pod's Ready condition, and ContainersReady with it.
func setReady(ready bool) func(*unstructured.Unstructured) {
	status := "False"
	if ready {
		status = "True"
	}
	return func(p *unstructured.Unstructured) {
		conds, _, _ := unstructured.NestedFieldNoCopy(p.Object, "status", "conditions")
		for _, c := range conds.([]any) {
			if m := c.(map[string]any); m["type"] == "Ready" || m["type"] == "ContainersReady" {
				m["status"] = status
			}
		}
	}
}

// setPodIP assigns the pod an IP, as the kubelet does once its sandbox runs.
func setPodIP(ip string) func(*unstructured.Unstructured) {
	return func(p *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(p.Object, ip, "status", "podIP")
		_ = unstructured.SetNestedSlice(p.Object, []any{map[string]any{"ip": ip}}, "status", "podIPs")
	}
}

// setLabels replaces the pod's labels.
func setLabels(labels map[string]string) func(*unstructured.Unstructured) {
	return func(p *unstructured.Unstructured) { p.SetLabels(labels) }
}

// setDeleting marks the pod terminating, as a graceful delete does.
func setDeleting(p *unstructured.Unstructured) {
	_ = unstructured.SetNestedField(p.Object, deletedAt, "metadata", "deletionTimestamp")
}

// deliveries runs a Watcher on c and returns the channel OnChange feeds,
// once the Watcher watches every pool in refs and their pods.
func (c cluster) deliveries(t *testing.T, refs ...Ref) (*Watcher, <-chan Snapshot) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan Snapshot, 16)
	w, err := New(Options{
		Dynamic: c.dyn,
		Refs:    refs,
		OnChange: func(s Snapshot) {
			select {
			case got <- s:
			case <-ctx.Done(): // the test has ended and reads no more
			}
		},
	})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
	c.waitWatching(t, refs...)
	return w, got
}

// waitTimeout bounds every wait for a delivery; deliveries come in
// milliseconds, so reaching it means the one awaited will not come.
const waitTimeout = 10 * time.Second

// next returns the next delivery.
func next(t *testing.T, got <-chan Snapshot) Snapshot {
	t.Helper()
	select {
	case s := <-got:
		return s
	case <-time.After(waitTimeout):
		t.Fatalf("no OnChange within %v", waitTimeout)
		return Snapshot{}
	}
}

// await reads deliveries until one holds want for every ref in it; the
// informers may split one change into several deliveries.
func await(t *testing.T, got <-chan Snapshot, want map[Ref]Pool) Snapshot {
	t.Helper()
	return waitFor(t, got, fmt.Sprint(want), func(s Snapshot) bool { return holds(s, want) })
}

// waitFor reads deliveries until one satisfies ok.
func waitFor(t *testing.T, got <-chan Snapshot, what string, ok func(Snapshot) bool) Snapshot {
	t.Helper()
	timeout := time.After(waitTimeout)
	var last Snapshot
	for {
		select {
		case last = <-got:
			if ok(last) {
				return last
			}
		case <-timeout:
			t.Fatalf("no OnChange with %s within %v; last %v", what, waitTimeout, last.pools)
			return last
		}
	}
}

func holds(s Snapshot, want map[Ref]Pool) bool {
	for r, p := range want {
		if !s.Pool(r).equal(p) {
			return false
		}
	}
	return true
}

// found is a found pool with these endpoints.
func found(eps ...Endpoint) Pool {
	if eps == nil {
		eps = []Endpoint{}
	}
	return Pool{Found: true, Endpoints: eps}
}
