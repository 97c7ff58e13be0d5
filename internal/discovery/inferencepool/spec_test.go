package inferencepool

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		doc     string
		ports   []int
		wantErr string
	}{
		{name: "ports sorted, duplicates once", doc: poolYAML(refA, "app: vllm", 8001, 8000, 8001), ports: []int{8000, 8001}},
		{name: "no labels", doc: poolYAML(refA, "{}", 8000), wantErr: "spec.selector.matchLabels: empty"},
		{name: "no ports", doc: poolYAML(refA, "app: vllm"), wantErr: "spec.targetPorts: empty"},
		{name: "ports not a list", doc: strings.Replace(poolYAML(refA, "app: vllm"), "targetPorts:", "targetPorts: 8000", 1),
			wantErr: "spec.targetPorts: not a list"},
		{name: "port too big", doc: poolYAML(refA, "app: vllm", 70000), wantErr: "spec.targetPorts[0].number: 70000 out of range"},
		{name: "port as string", doc: strings.Replace(poolYAML(refA, "app: vllm", 8000), "number: 8000", `number: "8000"`, 1),
			wantErr: "spec.targetPorts[0].number: not an integer"},
		{name: "label value not a string", doc: poolYAML(refA, "app: 7", 8000), wantErr: "spec.selector.matchLabels:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sp, err := parseSpec(decodePool(t, tt.doc))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseSpec() = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseSpec() = %v", err)
			}
			if !slices.Equal(sp.ports, tt.ports) {
				t.Fatalf("parseSpec().ports = %v, want %v", sp.ports, tt.ports)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	sp, err := parseSpec(pool(t, refA, "app: vllm-llama", 8000))
	if err != nil {
		t.Fatalf("parseSpec() = %v", err)
	}
	terminating := pod("team-a", "gone", "10.0.0.5", true, vllm)
	setDeleting(terminating)
	noReady := pod("team-a", "starting", "10.0.0.6", true, vllm)
	unstructured.RemoveNestedField(noReady.Object, "status", "conditions")
	unknown := pod("team-a", "lost", "10.0.0.7", true, vllm)
	_ = unstructured.SetNestedSlice(unknown.Object, []any{map[string]any{"type": "Ready", "status": "Unknown"}}, "status", "conditions")
	pods := []*unstructured.Unstructured{
		pod("team-a", "b", "10.0.0.2", true, vllm),
		pod("team-a", "a", "10.0.0.1", true, map[string]string{"app": "vllm-llama", "extra": "x"}),
		pod("team-a", "unready", "10.0.0.3", false, vllm),
		pod("team-a", "no-ip", "", true, vllm),
		pod("team-a", "web", "10.0.0.4", true, other),
		terminating,
		noReady,
		unknown,
	}
	want := []Endpoint{{"a", "10.0.0.1", 8000}, {"b", "10.0.0.2", 8000}}
	if got := sp.endpoints(pods); !slices.Equal(got, want) {
		t.Fatalf("endpoints() = %v, want %v", got, want)
	}
	if got := sp.endpoints(nil); got == nil || len(got) != 0 {
		t.Fatalf("endpoints(nil) = %#v, want empty, not nil", got)
	}
}

// slimPod keeps what endpoints and the informer read and nothing else, so
// a slimmed pod gives the same answer, and applying it twice changes
// nothing (client-go asks for that).
func TestSlimPod(t *testing.T) {
	t.Parallel()
	p := pod("team-a", "a", "10.0.0.1", true, vllm)
	p.SetResourceVersion("42")
	setDeleting(p)
	once, _ := slimPod(p)
	twice, _ := slimPod(once)
	if !reflect.DeepEqual(once, twice) {
		t.Fatalf("slimPod(slimPod(p)) = %v, want slimPod(p) = %v", twice, once)
	}
	want := map[string]any{
		"metadata": map[string]any{
			"name": "a", "namespace": "team-a", "uid": "uid-team-a-a", "resourceVersion": "42",
			"labels": map[string]any{"app": "vllm-llama"}, "deletionTimestamp": deletedAt,
		},
		"status": map[string]any{
			"podIP":      "10.0.0.1",
			"conditions": []any{map[string]any{"type": "Ready", "status": "True"}},
		},
	}
	if got := twice.(*unstructured.Unstructured).Object; !reflect.DeepEqual(got, want) {
		t.Fatalf("slimPod(p) = %v, want %v", got, want)
	}
	// A serving pod stays serving once slimmed, and one that is not stays not.
	for _, p := range []*unstructured.Unstructured{pod("team-a", "b", "10.0.0.2", true, vllm), pod("team-a", "c", "10.0.0.3", false, vllm)} {
		s, _ := slimPod(p)
		ip, ok := servingIP(p)
		if sip, sok := servingIP(s.(*unstructured.Unstructured)); sip != ip || sok != ok {
			t.Fatalf("servingIP(slimPod(%s)) = %q, %v; want %q, %v", p.GetName(), sip, sok, ip, ok)
		}
	}
	if o, _ := slimPod("tombstone"); o != "tombstone" {
		t.Fatalf("slimPod(non-pod) = %v, want it unchanged", o)
	}
}
