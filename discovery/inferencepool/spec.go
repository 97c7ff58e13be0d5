package inferencepool

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// poolResource is the InferencePool resource of the Gateway API Inference
// Extension, read as unstructured because its Go types are not a module
// gatekeeper can fetch.
var poolResource = schema.GroupVersionResource{
	Group:    "inference.networking.k8s.io",
	Version:  "v1",
	Resource: "inferencepools",
}

// spec is the part of an InferencePool's spec that selects endpoints.
type spec struct {
	selector labels.Selector
	ports    []int // sorted, unique
}

// parseSpec reads spec.selector.matchLabels and spec.targetPorts. The v1
// selector has matchLabels only (no matchExpressions), and the API server
// prunes fields its schema lacks, so nothing else can narrow the selection.
// An empty selector is refused: it would select every pod in the namespace,
// and the CRD requires at least one label.
func parseSpec(u *unstructured.Unstructured) (spec, error) {
	ml, _, err := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	if err != nil {
		return spec{}, fmt.Errorf("inferencepool: %s: spec.selector.matchLabels: %w", refOf(u), err)
	}
	if len(ml) == 0 {
		return spec{}, fmt.Errorf("inferencepool: %s: spec.selector.matchLabels: %w", refOf(u), errEmpty)
	}
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "targetPorts")
	raw, ok := v.([]any)
	if v != nil && !ok {
		return spec{}, fmt.Errorf("inferencepool: %s: spec.targetPorts: not a list: %T", refOf(u), v)
	}
	if len(raw) == 0 {
		return spec{}, fmt.Errorf("inferencepool: %s: spec.targetPorts: %w", refOf(u), errEmpty)
	}
	ports := make([]int, 0, len(raw))
	for i, p := range raw {
		n, err := portNumber(p)
		if err != nil {
			return spec{}, fmt.Errorf("inferencepool: %s: spec.targetPorts[%d].number: %w", refOf(u), i, err)
		}
		ports = append(ports, n)
	}
	slices.Sort(ports)
	return spec{selector: labels.SelectorFromSet(ml), ports: slices.Compact(ports)}, nil
}

// errEmpty marks a required field or file that holds nothing.
var errEmpty = errors.New("empty")

// portNumber reads {number: N}. JSON decoding into unstructured gives
// int64; anything else, or a number outside 1..65535, is an error.
func portNumber(p any) (int, error) {
	m, ok := p.(map[string]any)
	if !ok {
		return 0, fmt.Errorf("not an object: %T", p)
	}
	n, ok := m["number"].(int64)
	if !ok {
		return 0, fmt.Errorf("not an integer: %v", m["number"])
	}
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("%d out of range 1..65535", n)
	}
	return int(n), nil
}

func refOf(u *unstructured.Unstructured) Ref {
	return Ref{Namespace: u.GetNamespace(), Name: u.GetName()}
}

// endpoints returns an endpoint per target port of every pod that matches
// the selector, is ready, is not being deleted and has an IP, sorted. The
// result is never nil, so a found pool with no ready pod reads as empty.
func (s spec) endpoints(pods []*corev1.Pod) []Endpoint {
	out := []Endpoint{}
	for _, p := range pods {
		if !serving(p) || !s.selector.Matches(labels.Set(p.Labels)) {
			continue
		}
		for _, port := range s.ports {
			out = append(out, Endpoint{Pod: p.Name, IP: p.Status.PodIP, Port: port})
		}
	}
	slices.SortFunc(out, compareEndpoints)
	return out
}

// serving reports whether p may take traffic: Ready, not terminating (a
// terminating pod can stay Ready while it drains) and addressed.
func serving(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// slimPod is the pod informer's transform: it keeps only what endpoints and
// the informer read, so a namespace with many pods costs little memory.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone: the informer only needs its key
	}
	s := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              p.Name,
			Namespace:         p.Namespace,
			UID:               p.UID,
			ResourceVersion:   p.ResourceVersion,
			Labels:            p.Labels,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Status: corev1.PodStatus{PodIP: p.Status.PodIP},
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			s.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return s, nil
}
