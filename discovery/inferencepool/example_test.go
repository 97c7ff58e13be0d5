package inferencepool_test

import (
	"context"
	"fmt"

	"github.com/gatekeeper-dev/gatekeeper/discovery/inferencepool"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

// The fake clients stand in for ClientsFromConfig's.
func ExampleWatcher() {
	pool := &unstructured.Unstructured{}
	_ = pool.UnmarshalJSON([]byte(`{"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": {"namespace": "llm", "name": "llama"},
		"spec": {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": [{"number": 8000}]}}`))
	gvr := schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: "InferencePoolList"}, pool)
	kube := kubefake.NewClientset(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "llama-0", Labels: map[string]string{"app": "vllm"}},
		Status: corev1.PodStatus{PodIP: "fd00::7", Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	})

	ref := inferencepool.Ref{Namespace: "llm", Name: "llama"}
	w, err := inferencepool.New(inferencepool.Options{
		Dynamic: dyn,
		Kube:    kube,
		Refs:    []inferencepool.Ref{ref},
		OnChange: func(s inferencepool.Snapshot) {
			p := s.Pool(ref)
			fmt.Println(ref, "found:", p.Found)
			for _, e := range p.Endpoints {
				fmt.Println(e.Pod, e.Addr())
			}
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	<-w.Synced()
	cancel()
	fmt.Println("Run:", <-done)
	// Output:
	// llm/llama found: true
	// llama-0 [fd00::7]:8000
	// Run: <nil>
}
