package inferencepool_test

import (
	"context"
	"fmt"

	"github.com/gatekeeper-dev/gatekeeper/internal/discovery/inferencepool"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
)

// The fake dynamic client stands in for ClientsFromConfig's.
func ExampleWatcher() {
	pool := &unstructured.Unstructured{}
	_ = pool.UnmarshalJSON([]byte(`{"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": {"namespace": "llm", "name": "llama"},
		"spec": {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": [{"number": 8000}]}}`))
	pod := &unstructured.Unstructured{}
	_ = pod.UnmarshalJSON([]byte(`{"apiVersion": "v1", "kind": "Pod",
		"metadata": {"namespace": "llm", "name": "llama-0", "labels": {"app": "vllm"}},
		"status": {"podIP": "fd00::7", "conditions": [{"type": "Ready", "status": "True"}]}}`))
	pools := schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{pools: "InferencePoolList", pods: "PodList"}, pool, pod)

	ref := inferencepool.Ref{Namespace: "llm", Name: "llama"}
	w, err := inferencepool.New(inferencepool.Options{
		Dynamic: dyn,
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
