package inferencepool

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
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

// pod returns a pod of the vllm model server; ip "" means not yet assigned.
func pod(ns, name, ip string, ready bool, labels map[string]string) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:latest"}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			PodIP: ip,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.ContainersReady, Status: status},
				{Type: corev1.PodReady, Status: status},
			},
		},
	}
}

// cluster is a fake API server the watcher reads and a test writes to.
type cluster struct {
	dyn  *dynfake.FakeDynamicClient
	kube *kubefake.Clientset
}

func newCluster(objs ...runtime.Object) cluster {
	var pools, pods []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*unstructured.Unstructured); ok {
			pools = append(pools, o)
		} else {
			pods = append(pods, o)
		}
	}
	kinds := map[schema.GroupVersionResource]string{poolResource: "InferencePoolList"}
	return cluster{
		dyn:  dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, pools...),
		kube: kubefake.NewClientset(pods...),
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

func (c cluster) createPod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, err := c.kube.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
}

// editPod reads a pod, lets edit change it and writes it back.
func (c cluster) editPod(t *testing.T, ns, name string, edit func(*corev1.Pod)) {
	t.Helper()
	pods := c.kube.CoreV1().Pods(ns)
	p, err := pods.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod: %v", err)
	}
	edit(p)
	if _, err := pods.Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pod: %v", err)
	}
}

func (c cluster) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := c.kube.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
}

func setReady(ready bool) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
				if ready {
					p.Status.Conditions[i].Status = corev1.ConditionTrue
				}
			}
		}
	}
}

// deliveries runs a Watcher on c and returns the channel OnChange feeds.
func (c cluster) deliveries(t *testing.T, refs ...Ref) (*Watcher, <-chan Snapshot) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan Snapshot, 16)
	w, err := New(Options{
		Dynamic: c.dyn,
		Kube:    c.kube,
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
