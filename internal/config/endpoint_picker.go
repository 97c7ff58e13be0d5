package config

import (
	"fmt"
	"net"
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
	// Fallbacks is how many more pods (0 to 8; 0: none) each pick names
	// after the one that holds the request's slot, best first: pods that
	// could take it now, where the gateway goes when it cannot use the
	// first (its retry policy retries). They hold no slot. The gateway must read a list: Envoy's
	// ORIGINAL_DST cluster reads the header as one address, so keep 0
	// with it (docs/kubernetes.md).
	Fallbacks int `yaml:"fallbacks"`
	// Scores writes each pod's routing score for the request (the pick's
	// and up to 8 others') in the envoy.lb dynamic metadata, under
	// x-gateway-destination-endpoint-scores, as llm-d's router does with
	// --emit-endpoint-scores. Nothing is written while no routing scorer
	// scores the pods.
	Scores bool `yaml:"scores"`
}

// MaxPickerFallbacks bounds endpoint_picker.fallbacks.
const MaxPickerFallbacks = 8

// InferencePool names an InferencePool (inference.networking.k8s.io/v1)
// whose pods an upstream entry stands for.
type InferencePool struct {
	// Name is the InferencePool's name.
	Name string `yaml:"name"`
	// Namespace is its namespace ("" means gatekeeper's own).
	Namespace string `yaml:"namespace"`
}

// podPlaceholderHost is the host of an inference_pool upstream's url (and
// of its sources' urls) that each pod's IP replaces.
const podPlaceholderHost = "pod"

// DefaultPickerListen is endpoint_picker.listen when the file leaves it
// out: the port the Inference Extension's manifests give a picker.
const DefaultPickerListen = ":9002"

// defaultPickerHealthListen is endpoint_picker.health_listen when the file
// leaves it out.
const defaultPickerHealthListen = ":9003"

// PickerHealthOff turns the plaintext health listener off.
const PickerHealthOff = "off"

func (k *checker) endpointPicker(e *EndpointPicker, s Server) {
	if e == nil {
		return
	}
	k.listen("endpoint_picker.listen", e.Listen)
	if clash(e.Listen, s.AdminListen) {
		k.add("endpoint_picker.listen", "must not bind the port of server.admin_listen (%q), got %q", s.AdminListen, e.Listen)
	}
	if e.HealthListen != PickerHealthOff {
		k.listen("endpoint_picker.health_listen", e.HealthListen)
		if clash(e.HealthListen, e.Listen) || clash(e.HealthListen, s.AdminListen) {
			k.add("endpoint_picker.health_listen", "must not bind the port of endpoint_picker.listen or server.admin_listen, got %q", e.HealthListen)
		}
	}
	if e.Fallbacks < 0 || e.Fallbacks > MaxPickerFallbacks {
		k.add("endpoint_picker.fallbacks", "must be 0 to %d, got %d", MaxPickerFallbacks, e.Fallbacks)
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

// clash reports whether listening on a and on b would bind one socket:
// the same port on the same host, or on every address ("", 0.0.0.0, ::).
func clash(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	any := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || any(ha) || any(hb)
}

// picker warns about the endpoint picker's settings that load but that
// kubelet's probes cannot reach: with TLS on the ext_proc listener and no
// plaintext health listener, or that listener on loopback.
func (w *warner) picker() {
	e := w.c.EndpointPicker
	switch {
	case e == nil:
	case e.HealthListen == PickerHealthOff && e.TLS != nil:
		w.add("endpoint_picker.health_listen", "is off while endpoint_picker.tls is set: kubelet's gRPC probes speak no TLS, "+
			"so in Kubernetes they can never succeed; leave health_listen at its default (%q)", defaultPickerHealthListen)
	case e.HealthListen != PickerHealthOff && loopback(e.HealthListen):
		w.add("endpoint_picker.health_listen", "%q listens on loopback only: kubelet probes the pod's IP and cannot reach it", e.HealthListen)
	}
}

func loopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
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
func poolURL() string { return fmt.Sprintf("http://%s", podPlaceholderHost) }
