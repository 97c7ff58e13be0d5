package config

import (
	"strings"
	"testing"
)

func TestEndpointPicker(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
endpoint_picker: {}
upstreams:
  - inference_pool: {name: vllm-llama3}
    max_inflight: 64
    sources: [{kind: vllm, url: "http://pod:8000/metrics"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.EndpointPicker.Listen != DefaultPickerListen || c.EndpointPicker.Fallbacks != 0 || c.EndpointPicker.Scores {
		t.Errorf("listen = %q, fallbacks %d, scores %v; want the default %q, none, off", c.EndpointPicker.Listen,
			c.EndpointPicker.Fallbacks, c.EndpointPicker.Scores, DefaultPickerListen)
	}
	if on, err := Parse([]byte("endpoint_picker: {fallbacks: 2, scores: true}\nupstreams: [{url: 'http://a:1'}]")); err != nil ||
		on.EndpointPicker.Fallbacks != 2 || !on.EndpointPicker.Scores {
		t.Fatalf("fallbacks 2, scores on: %+v, %v", on, err)
	}
	u := c.Upstreams[0]
	if u.Name != "vllm-llama3" || u.URL != "http://pod" || u.InferencePool.Namespace != "" {
		t.Errorf("upstream = %q %q %+v: the pool names it and the placeholder url stands in", u.Name, u.URL, u.InferencePool)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"endpoint_picker: {listen: nope}\nupstreams: [{url: 'http://a:1'}]", "endpoint_picker.listen"},
		{"endpoint_picker: {listen: '127.0.0.1:9090'}\nupstreams: [{url: 'http://a:1'}]", "must not bind the port of server.admin_listen"},
		{"endpoint_picker: {tls: {cert_file: c}}\nupstreams: [{url: 'http://a:1'}]", "endpoint_picker.tls.key_file"},
		{"endpoint_picker: {listen: '0.0.0.0:9090'}\nupstreams: [{url: 'http://a:1'}]", "must not bind the port of server.admin_listen"},
		{"endpoint_picker: {health_listen: '0.0.0.0:9002'}\nupstreams: [{url: 'http://a:1'}]", "endpoint_picker.health_listen"},
		{"upstreams: [{inference_pool: {name: Bad_Name}}]", "upstreams[0].inference_pool.name"},
		{"upstreams: [{inference_pool: {name: p, namespace: 'a b'}}]", "upstreams[0].inference_pool.namespace"},
		{"upstreams: [{inference_pool: {name: p}, dns_interval: 5s}]", "cannot be set with inference_pool"},
		{"endpoint_picker: {fallbacks: -1}\nupstreams: [{url: 'http://a:1'}]", "endpoint_picker.fallbacks: must be 0 to 8, got -1"},
		{"endpoint_picker: {fallbacks: 9}\nupstreams: [{url: 'http://a:1'}]", "endpoint_picker.fallbacks: must be 0 to 8, got 9"},
	} {
		_, err := Parse([]byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error naming %q", tt.yaml, err, tt.want)
		}
	}
}

func TestEndpointPickerWarnings(t *testing.T) {
	t.Parallel()
	for yaml, want := range map[string]string{
		"endpoint_picker: {health_listen: 'off', tls: {cert_file: c, key_file: k}}": "kubelet's gRPC probes speak no TLS",
		"endpoint_picker: {health_listen: '127.0.0.1:9003'}":                        "loopback only",
		"endpoint_picker: {}": "",
	} {
		c, err := Parse([]byte(yaml + "\nupstreams: [{url: 'http://a:1', sources: [{kind: vllm, url: 'http://a:1/metrics'}]}]"))
		if err != nil {
			t.Fatal(err)
		}
		var got string
		for _, w := range c.Warnings(1) {
			got += w.String()
		}
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("%s: warnings %q, want %q", yaml, got, want)
		}
	}
}
