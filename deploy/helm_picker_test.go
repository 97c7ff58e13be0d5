package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// checkChartPicker checks what the chart renders as the endpoint picker
// (endpointPicker.enabled): the policy's endpoint_picker and upstreams, the
// gRPC and health ports instead of the http one, the gRPC probes on the
// plaintext health port, the Service's grpc-ext-proc port (and no health
// port), the TLS Secret's mount, the RBAC of the pool watch exactly when a
// pool is named, and that config.Parse accepts the policy.
func checkChartPicker(t *testing.T, objs map[string]map[string]any, tt chartCase) {
	t.Helper()
	p := tt.picker
	text := policyText(t, objs)
	var policy struct {
		eppPolicy `yaml:",inline"`
		Cluster   *struct {
			Replicas int `yaml:"replicas"`
			Redis    struct {
				URL string `yaml:"url"`
			} `yaml:"redis"`
		} `yaml:"cluster"`
	}
	if err := yaml.Unmarshal([]byte(text), &policy); err != nil || policy.EndpointPicker == nil {
		t.Fatalf("the rendered policy: %v; endpoint_picker %v, want one", err, policy.EndpointPicker != nil)
	}
	var (
		d   deployment
		svc service
	)
	decodeInto(t, objs["Deployment/gatekeeper"], &d)
	decodeInto(t, objs["Service/gatekeeper"], &svc)
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	portNames := func() []string {
		var names []string
		for _, cp := range c.Ports {
			names = append(names, fmt.Sprintf("%s:%d", cp.Name, cp.ContainerPort))
		}
		return names
	}()
	svcPorts := func() []string {
		var ports []string
		for _, sp := range svc.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d>%s/%s", sp.Name, sp.Port, sp.TargetPort, sp.AppProtocol))
		}
		return ports
	}()
	grpcProbe := func(pr *probe, service string) bool {
		return pr != nil && pr.GRPC != nil && pr.GRPC.Port == p.healthPort && pr.GRPC.Service != nil && *pr.GRPC.Service == service && pr.HTTPGet.Path == ""
	}
	// Where the chart mounts the Secret, as inference-gateway/base does.
	tlsDir := "/etc/gatekeeper-tls"
	var tlsOK bool
	if p.tlsSecret == "" {
		tlsOK = policy.EndpointPicker.TLS == nil && !slices.ContainsFunc(pod.Volumes, func(v podVolume) bool { return v.Secret != nil })
	} else {
		tls := policy.EndpointPicker.TLS
		tlsOK = tls != nil && tls.CertFile == tlsDir+"/tls.crt" && tls.KeyFile == tlsDir+"/tls.key" && mountIsSecret(d, c, tlsDir) &&
			slices.ContainsFunc(pod.Volumes, func(v podVolume) bool { return v.Secret != nil && v.Secret.SecretName == p.tlsSecret })
	}
	ups := policy.Upstreams
	var upstreamsOK bool
	if p.pool != "" {
		upstreamsOK = len(ups) == 1 && ups[0].InferencePool != nil && ups[0].InferencePool.Name == p.pool &&
			ups[0].InferencePool.Namespace == p.poolNamespace && strings.HasPrefix(ups[0].URL, "http://pod")
	} else {
		upstreamsOK = len(ups) == 1 && ups[0].InferencePool == nil && ups[0].URL == "http://vllm:8000" // values' policy
	}
	clusterOK := tt.redisURL == "" && policy.Cluster == nil ||
		tt.redisURL != "" && policy.Cluster != nil && policy.Cluster.Redis.URL == tt.redisURL && policy.Cluster.Replicas == tt.replicas
	watches := p.pool != ""
	tokenOK := pod.AutomountServiceAccountToken != nil && *pod.AutomountServiceAccountToken == watches &&
		(pod.ServiceAccountName == "gatekeeper") == watches

	tests := []struct {
		name string
		ok   bool
	}{
		{fmt.Sprintf("endpoint_picker.listen :%d", p.port), policy.EndpointPicker.Listen == fmt.Sprintf(":%d", p.port)},
		{fmt.Sprintf("endpoint_picker.health_listen :%d", p.healthPort), policy.EndpointPicker.HealthListen == fmt.Sprintf(":%d", p.healthPort)},
		{"no server.listen: no HTTP traffic listener", lookup(policyValues(t, objs), "server", "listen") == nil},
		{"server.admin_listen on the metrics port", policy.Server.AdminListen == ":9090"},
		{fmt.Sprintf("container ports grpc:%d, health:%d and metrics:9090 only (have %v)", p.port, p.healthPort, portNames),
			slices.Equal(portNames, []string{fmt.Sprintf("grpc:%d", p.port), fmt.Sprintf("health:%d", p.healthPort), "metrics:9090"})},
		{fmt.Sprintf("Service ports grpc-ext-proc:%d>grpc/http2 and metrics only, no health port (have %v)", p.port, svcPorts),
			slices.Equal(svcPorts, []string{fmt.Sprintf("grpc-ext-proc:%d>grpc/http2", p.port), "metrics:9090>metrics/"})},
		{fmt.Sprintf("startup and liveness probes: gRPC health service liveness on the health port %d", p.healthPort),
			grpcProbe(c.StartupProbe, "liveness") && grpcProbe(c.LivenessProbe, "liveness")},
		{fmt.Sprintf("readiness probe: gRPC health service readiness on the health port %d", p.healthPort), grpcProbe(c.ReadinessProbe, "readiness")},
		{"TLS: endpoint_picker.tls and the Secret's mount exactly when endpointPicker.tls.secretName is set", tlsOK},
		{"upstreams: one with inference_pool when a pool is named, else values' policy", upstreamsOK},
		{"cluster as redis asks", clusterOK},
		{"a ServiceAccount with its token exactly when a pool is watched", tokenOK &&
			(objs["ServiceAccount/gatekeeper"] != nil) == watches},
	}
	for _, tt := range tests {
		if !tt.ok {
			t.Errorf("endpoint picker: want %s", tt.name)
		}
	}
	if np := objs["NetworkPolicy/gatekeeper"]; np != nil {
		if port := lookup(lookup(np, "spec", "ingress").([]any)[0], "ports").([]any)[0]; lookup(port, "port") != "grpc" {
			t.Errorf("NetworkPolicy gatekeeper's first ingress port = %v, want grpc (the picker's)", lookup(port, "port"))
		}
	}
	if watches {
		checkChartRBAC(t, objs, p)
	}
	cfg, err := config.Parse([]byte(text))
	switch {
	case err != nil:
		t.Errorf("config.Parse(the rendered policy) = %v", err)
	case cfg.EndpointPicker == nil || cfg.EndpointPicker.HealthListen != fmt.Sprintf(":%d", p.healthPort):
		t.Errorf("config.Parse(the rendered policy).EndpointPicker = %+v, want HealthListen :%d", cfg.EndpointPicker, p.healthPort)
	}
}

// checkChartRBAC: the Role reads the pool and its pods in the pool's
// namespace, bound to the release's ServiceAccount.
func checkChartRBAC(t *testing.T, objs map[string]map[string]any, p *chartPicker) {
	t.Helper()
	var (
		role    rbacRole
		binding rbacBinding
	)
	decodeInto(t, objs["Role/gatekeeper"], &role)
	decodeInto(t, objs["RoleBinding/gatekeeper"], &binding)
	ns := func(key string) string { s, _ := lookup(objs[key], "metadata", "namespace").(string); return s }
	subject := lookup(objs["RoleBinding/gatekeeper"], "subjects").([]any)
	if !roleReadsOnly(role, map[string]string{"inference.networking.k8s.io/inferencepools": "get,list,watch", "/pods": "get,list,watch"}) {
		t.Errorf("Role gatekeeper rules %+v, want get, list and watch on inferencepools and pods only", role.Rules)
	}
	if ns("Role/gatekeeper") != p.poolNamespace || ns("RoleBinding/gatekeeper") != p.poolNamespace {
		t.Errorf("Role and RoleBinding in namespaces %q and %q, want the pool's %q (\"\": the release's)",
			ns("Role/gatekeeper"), ns("RoleBinding/gatekeeper"), p.poolNamespace)
	}
	if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != "gatekeeper" || len(subject) != 1 ||
		lookup(subject[0], "kind") != "ServiceAccount" || lookup(subject[0], "name") != "gatekeeper" || lookup(subject[0], "namespace") != "default" {
		t.Errorf("RoleBinding gatekeeper = roleRef %+v, subjects %v; want Role gatekeeper for ServiceAccount default/gatekeeper", binding.RoleRef, subject)
	}
}
