package inferencepool

import (
	"errors"
	"fmt"
	"slices"

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

// podResource is the core pods resource. Pods are read as unstructured
// too, through the same dynamic client: client-go's typed clientset would
// pull every API group of k8s.io/api into the build for one type.
var podResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

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
func (s spec) endpoints(pods []*unstructured.Unstructured) []Endpoint {
	out := []Endpoint{}
	for _, p := range pods {
		ip, ok := servingIP(p)
		if !ok || !s.selector.Matches(labels.Set(p.GetLabels())) {
			continue
		}
		for _, port := range s.ports {
			out = append(out, Endpoint{Pod: p.GetName(), ip: ip, port: port})
		}
	}
	slices.SortFunc(out, compareEndpoints)
	return out
}

// servingIP returns p's IP when p may take traffic: Ready, not terminating
// (a terminating pod can stay Ready while it drains) and addressed. Any
// deletionTimestamp counts, so one that does not parse as a time does too.
func servingIP(p *unstructured.Unstructured) (string, bool) {
	if ts, ok, _ := unstructured.NestedFieldNoCopy(p.Object, "metadata", "deletionTimestamp"); ok && ts != nil {
		return "", false
	}
	ip, _, _ := unstructured.NestedString(p.Object, "status", "podIP")
	ready, _ := readyStatus(p)
	return ip, ip != "" && ready == "True"
}

// readyStatus returns the status ("True", "False", "Unknown") of p's Ready
// condition, and whether p has one.
func readyStatus(p *unstructured.Unstructured) (string, bool) {
	v, _, _ := unstructured.NestedFieldNoCopy(p.Object, "status", "conditions")
	conds, _ := v.([]any)
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Ready" {
			status, _ := m["status"].(string)
			return status, true
		}
	}
	return "", false
}

// slimPod is the pod informer's transform: it keeps only what endpoints and
// the informer read (name, namespace, uid, resourceVersion, labels,
// deletionTimestamp, status.podIP and the Ready condition), so a namespace
// with many pods costs little memory. Applying it twice changes nothing.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a tombstone: the informer only needs its key
	}
	meta := map[string]any{}
	for _, k := range [...]string{"name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp"} {
		if v, ok, _ := unstructured.NestedFieldNoCopy(p.Object, "metadata", k); ok {
			meta[k] = v
		}
	}
	status := map[string]any{}
	if ip, ok, _ := unstructured.NestedFieldNoCopy(p.Object, "status", "podIP"); ok {
		status["podIP"] = ip
	}
	if ready, ok := readyStatus(p); ok {
		status["conditions"] = []any{map[string]any{"type": "Ready", "status": ready}}
	}
	return &unstructured.Unstructured{Object: map[string]any{"metadata": meta, "status": status}}, nil
}
