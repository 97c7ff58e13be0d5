package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// crd is one custom resource's schema file, converted from the
// CustomResourceDefinition that a Go module ships. file follows
// kubeconform's "{{ .ResourceKind }}{{ .KindSuffix }}.json" naming: the kind
// in lower case, then the group's first label and the version.
type crd struct {
	file                  string
	module, moduleVersion string // the Go module holding the CRD, and its version
	path                  string // the CRD's file inside the module (one or several documents)
	group, version, kind  string
}

// crds are the custom resources deploy/inference-gateway and the Helm
// chart use. Bump a version deliberately, then rerun gen and the deploy
// tests.
//
// PrometheusRule comes from the Prometheus Operator's main module, which
// ships the CRDs; the module proxy serves it up to v0.94.1 (v0.95.x answer
// "not available"). Its PrometheusRule types are the same in
// pkg/apis/monitoring v0.94.1 and v0.95.2, the version go.mod pins for
// ServiceMonitor, so the two schemas describe one API.
var crds = []crd{
	{"inferencepool-inference-v1.json", "sigs.k8s.io/gateway-api-inference-extension", "v1.6.0",
		"config/crd/bases/inference.networking.k8s.io_inferencepools.yaml", "inference.networking.k8s.io", "v1", "InferencePool"},
	{"gateway-gateway-v1.json", "sigs.k8s.io/gateway-api", "v1.6.3",
		"config/crd/standard/gateway.networking.k8s.io_gateways.yaml", "gateway.networking.k8s.io", "v1", "Gateway"},
	{"httproute-gateway-v1.json", "sigs.k8s.io/gateway-api", "v1.6.3",
		"config/crd/standard/gateway.networking.k8s.io_httproutes.yaml", "gateway.networking.k8s.io", "v1", "HTTPRoute"},
	{"destinationrule-networking-v1.json", "istio.io/api", "v1.32.0",
		"kubernetes/customresourcedefinitions.gen.yaml", "networking.istio.io", "v1", "DestinationRule"},
	{"envoyproxy-gateway-v1alpha1.json", "github.com/envoyproxy/gateway", "v1.9.1",
		"charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_envoyproxies.yaml", "gateway.envoyproxy.io", "v1alpha1", "EnvoyProxy"},
	{"prometheusrule-monitoring-v1.json", "github.com/prometheus-operator/prometheus-operator", "v0.94.1",
		"example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml", "monitoring.coreos.com", "v1", "PrometheusRule"},
	{"scaledobject-keda-v1alpha1.json", "github.com/kedacore/keda/v2", "v2.20.2",
		"config/crd/bases/keda.sh_scaledobjects.yaml", "keda.sh", "v1alpha1", "ScaledObject"},
}

// schema reads the CRD and converts its version's openAPIV3Schema.
func (c crd) schema() (map[string]any, error) {
	dir, err := moduleDir(c.module, c.moduleVersion)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, c.path))
	if err != nil {
		return nil, fmt.Errorf("gen: %w", err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 1<<16)
	for {
		var doc struct {
			Kind string `json:"kind"`
			Spec struct {
				Group string `json:"group"`
				Names struct {
					Kind string `json:"kind"`
				} `json:"names"`
				Versions []struct {
					Name   string `json:"name"`
					Schema struct {
						OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
					} `json:"schema"`
				} `json:"versions"`
			} `json:"spec"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("gen: %s@%s %s: no CustomResourceDefinition of %s %s", c.module, c.moduleVersion, c.path, c.group, c.kind)
		}
		if err != nil {
			return nil, fmt.Errorf("gen: %s: %w", c.path, err)
		}
		if doc.Kind != "CustomResourceDefinition" || doc.Spec.Group != c.group || doc.Spec.Names.Kind != c.kind {
			continue
		}
		for _, v := range doc.Spec.Versions {
			if v.Name != c.version {
				continue
			}
			s := convert(v.Schema.OpenAPIV3Schema)
			props, ok := s["properties"].(map[string]any)
			if !ok {
				return nil, fmt.Errorf("gen: %s %s: schema without properties", c.kind, c.version)
			}
			g := &gen{seen: map[reflect.Type]bool{}}
			props["metadata"] = g.schema(reflect.TypeFor[metav1.ObjectMeta]())
			return s, nil
		}
		return nil, fmt.Errorf("gen: %s: no version %s", c.kind, c.version)
	}
}

// convert turns one OpenAPI v3 schema of a CRD into a strict JSON schema.
func convert(in map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range in {
		switch k {
		case "description", "example", "externalDocs",
			"x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
			"x-kubernetes-map-type", "x-kubernetes-embedded-resource",
			"x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields", "nullable":
			// Documentation, CEL and server-side merge hints: nothing a JSON
			// schema checks. The last three are handled below.
		case "properties":
			props := map[string]any{}
			for name, p := range v.(map[string]any) {
				props[name] = convert(p.(map[string]any))
			}
			out[k] = props
		case "items", "additionalProperties", "not":
			if m, ok := v.(map[string]any); ok {
				out[k] = convert(m)
			} else {
				out[k] = v // additionalProperties: true or false
			}
		case "allOf", "anyOf", "oneOf":
			var list []any
			for _, s := range v.([]any) {
				list = append(list, convert(s.(map[string]any)))
			}
			out[k] = list
		default:
			out[k] = v
		}
	}
	if in["x-kubernetes-int-or-string"] == true {
		delete(out, "type")
		out["oneOf"] = []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}
	}
	if t, ok := out["type"].(string); ok && in["nullable"] == true {
		out["type"] = []any{t, "null"}
	}
	_, hasProps := out["properties"]
	_, hasAdditional := out["additionalProperties"]
	if hasProps && !hasAdditional && in["x-kubernetes-preserve-unknown-fields"] != true {
		out["additionalProperties"] = false
	}
	return out
}

// moduleDir downloads a module version into the module cache (through the
// module proxy, checked against go.sum's checksum database) and returns its
// directory.
func moduleDir(path, version string) (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", path+"@"+version).Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr != nil || m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("gen: go mod download %s@%s: %v %s", path, version, err, m.Error)
	}
	return m.Dir, nil
}
