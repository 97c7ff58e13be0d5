package config

import (
	"fmt"
	"strings"
)

// EndpointPicker runs gatekeeper as the endpoint picker of the Gateway API
// Inference Extension: an Envoy ext_proc gRPC server that a gateway asks
// which pod takes each request (docs/kubernetes.md). Optional: without it
// gatekeeper is the HTTP proxy. With it the traffic listener
// (server.listen) is not opened; the admin listener stays.
type EndpointPicker struct {
	// Listen is the gRPC listener (host:port; "" means ":9002"): the
	// ext_proc service and gRPC health (services "liveness", "readiness"
	// and "envoy.service.ext_proc.v3.ExternalProcessor").
	Listen string `yaml:"listen"`
	// HealthListen is a second, plaintext gRPC listener ("" means ":9003")
	// with only the health services: kubelet's gRPC probes speak no TLS,
	// so with tls set the probes go here (the Inference Extension's own
	// picker has the same split). "off" serves health on listen alone.
	HealthListen string `yaml:"health_listen"`
	// TLS, if set, serves the gRPC listener over TLS (what Istio, kgateway
	// and the Inference Extension's own manifests expect of a picker);
	// without it the listener speaks plaintext HTTP/2 (h2c).
	TLS *TLS `yaml:"tls"`
}

// InferencePool names an InferencePool (inference.networking.k8s.io/v1)
// whose pods an upstream entry stands for.
type InferencePool struct {
	// Name is the InferencePool's name.
	Name string `yaml:"name"`
	// Namespace is its namespace ("" means gatekeeper's own).
	Namespace string `yaml:"namespace"`
}

// PodPlaceholderHost is the host of an inference_pool upstream's url (and
// of its sources' urls) that each pod's IP replaces.
const PodPlaceholderHost = "pod"

// DefaultPickerListen is endpoint_picker.listen when the file leaves it
// out: the port the Inference Extension's manifests give a picker.
const DefaultPickerListen = ":9002"

// DefaultPickerHealthListen is endpoint_picker.health_listen when the file
// leaves it out.
const DefaultPickerHealthListen = ":9003"

// PickerHealthOff turns the plaintext health listener off.
const PickerHealthOff = "off"

func (k *checker) endpointPicker(e *EndpointPicker, s Server) {
	if e == nil {
		return
	}
	k.listen("endpoint_picker.listen", e.Listen)
	if e.Listen == s.AdminListen {
		k.add("endpoint_picker.listen", "must differ from server.admin_listen (%q)", s.AdminListen)
	}
	if e.HealthListen != PickerHealthOff {
		k.listen("endpoint_picker.health_listen", e.HealthListen)
		if e.HealthListen == e.Listen || e.HealthListen == s.AdminListen {
			k.add("endpoint_picker.health_listen", "must differ from endpoint_picker.listen and server.admin_listen, got %q", e.HealthListen)
		}
	}
	if t := e.TLS; t != nil {
		if t.CertFile == "" {
			k.add("endpoint_picker.tls.cert_file", "is required with endpoint_picker.tls")
		}
		if t.KeyFile == "" {
			k.add("endpoint_picker.tls.key_file", "is required with endpoint_picker.tls")
		}
	}
}

// inferencePool checks an upstream's inference_pool (p is its key path).
func (k *checker) inferencePool(p string, u Upstream) {
	ip := u.InferencePool
	if ip == nil {
		return
	}
	if !isDNSLabel(ip.Name, 253) {
		k.add(p+".inference_pool.name", "must be a Kubernetes object name (lowercase letters, digits, '-' and '.'), got %q", ip.Name)
	}
	if ip.Namespace != "" && !isDNSLabel(ip.Namespace, 63) {
		k.add(p+".inference_pool.namespace", "must be a Kubernetes namespace name, got %q", ip.Namespace)
	}
	if u.DNSInterval > 0 {
		k.add(p+".dns_interval", "cannot be set with inference_pool: the pool's pods are watched, not resolved")
	}
}

func isDNSLabel(s string, max int) bool {
	if s == "" || len(s) > max || strings.HasPrefix(s, "-") || strings.HasSuffix(s, "-") {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// poolURL is the url an inference_pool upstream gets when its file leaves
// it out: the placeholder host on plain HTTP (the port comes from the
// pool's targetPorts).
func poolURL() string { return fmt.Sprintf("http://%s", PodPlaceholderHost) }
