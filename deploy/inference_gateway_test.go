package deploy

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// inferenceGateway is the endpoint-picker example, relative to this folder.
const inferenceGateway = "inference-gateway"

// The example's kustomizations: the base every gateway needs, and one
// overlay per gateway. objects are the kind/name of all they build.
var inferenceGatewayBuilds = []struct {
	dir     string
	objects []string
}{
	{"base", eppBase},
	{"istio", append(slices.Clone(eppBase), "Gateway/inference-gateway", "DestinationRule/gatekeeper-epp")},
	{"envoy-gateway", append(slices.Clone(eppBase), "Gateway/inference-gateway", "EnvoyProxy/inference-gateway")},
}

var eppBase = []string{
	"ConfigMap/gatekeeper-epp-policy", "Deployment/gatekeeper-epp", "Service/gatekeeper-epp",
	"ServiceAccount/gatekeeper-epp", "Role/gatekeeper-epp", "RoleBinding/gatekeeper-epp",
	"InferencePool/vllm-llama3-8b", "HTTPRoute/llm-route",
}

// eppNoSchema lists the kinds of the example that schemas/ has no schema
// for, so kubeconform skips them by name. Empty: schemas/gen vendors every
// kind the example uses (the CRDs from their modules); a kind added without
// one fails kubeconform with "could not find schema" until it is listed
// here or vendored.
var eppNoSchema = []string{}

// envoyDefaultMaxRequests is Envoy's circuit breaker default for
// max_requests, max_pending_requests and max_connections: the ceiling on
// concurrent ext_proc streams that llm-d/llm-d#1582 ran into.
const envoyDefaultMaxRequests = 1024

// TestInferenceGatewayKustomize builds each kustomization of the example as
// `kubectl apply -k` would and validates what it applies with kubeconform
// -strict against the vendored schemas: every object, labelled.
func TestInferenceGatewayKustomize(t *testing.T) {
	t.Parallel()
	kustomize := lookTool(t, "kustomize", "scripts/install/kustomize.sh")
	kubeconform := lookTool(t, "kubeconform", "scripts/install/kubeconform.sh")
	for _, tt := range inferenceGatewayBuilds {
		t.Run(tt.dir, func(t *testing.T) {
			t.Parallel()
			built := kustomizeBuild(t, kustomize, tt.dir)
			args := []string{"-strict", "-summary", "-schema-location", schemaLocation(t)}
			if len(eppNoSchema) > 0 {
				t.Logf("kubeconform skips %v: no schema in schemas/", eppNoSchema)
				args = append(args, "-skip", strings.Join(eppNoSchema, ","))
			}
			if out, err := runTool(t, 30*time.Second, []byte(built), kubeconform, append(args, "-")...); err != nil {
				t.Errorf("kubeconform on kustomize build %s: %v\n%s", tt.dir, err, out)
			}
			objs := decodeObjects(t, built)
			if got, want := slices.Sorted(maps.Keys(objs)), slices.Sorted(slices.Values(tt.objects)); !slices.Equal(got, want) {
				t.Errorf("kustomize build %s = %v, want %v", tt.dir, got, want)
			}
			for key, obj := range objs {
				if lookup(obj, "metadata", "labels", "app.kubernetes.io/part-of") != "gatekeeper" {
					t.Errorf("%s: labels %v, want app.kubernetes.io/part-of=gatekeeper", key, lookup(obj, "metadata", "labels"))
				}
			}
		})
	}
}

// TestInferenceGatewayListsEveryManifest: each kustomization lists every
// manifest in its folder (envoy/ holds no Kubernetes object).
func TestInferenceGatewayListsEveryManifest(t *testing.T) {
	t.Parallel()
	for _, tt := range inferenceGatewayBuilds {
		dir := filepath.Join(inferenceGateway, tt.dir)
		var k struct {
			Resources []string `yaml:"resources"`
		}
		readYAML(t, filepath.Join(dir, "kustomization.yaml"), &k)
		onDisk, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, p := range onDisk {
			if filepath.Base(p) != "kustomization.yaml" {
				want = append(want, filepath.Base(p))
			}
		}
		got := slices.DeleteFunc(slices.Clone(k.Resources), func(r string) bool { return r == "../base" })
		if slices.Sort(got); !slices.Equal(got, want) {
			t.Errorf("%s/kustomization.yaml resources = %v, want every manifest %v", dir, got, want)
		}
		if tt.dir != "base" && !slices.Contains(k.Resources, "../base") {
			t.Errorf("%s/kustomization.yaml resources = %v, want ../base", dir, k.Resources)
		}
	}
}

// eppPolicy is the part of the endpoint picker's policy the checks read,
// decoded as the file writes it: config.Parse would fill in the defaults
// and hide a key the manifests depend on but the file leaves out.
// TestShippedPoliciesCheckClean runs the whole policy through gatekeeper -check.
type eppPolicy struct {
	Server struct {
		AdminListen     string `yaml:"admin_listen"`
		DrainDelay      string `yaml:"drain_delay"`
		ShutdownTimeout string `yaml:"shutdown_timeout"`
	} `yaml:"server"`
	EndpointPicker *struct {
		Listen       string `yaml:"listen"`
		HealthListen string `yaml:"health_listen"`
		TLS          *struct {
			CertFile string `yaml:"cert_file"`
			KeyFile  string `yaml:"key_file"`
		} `yaml:"tls"`
	} `yaml:"endpoint_picker"`
	Upstreams []struct {
		Name          string `yaml:"name"`
		URL           string `yaml:"url"`
		InferencePool *struct {
			Name      string `yaml:"name"`
			Namespace string `yaml:"namespace"`
		} `yaml:"inference_pool"`
		Sources []struct {
			Kind string `yaml:"kind"`
			URL  string `yaml:"url"`
		} `yaml:"sources"`
	} `yaml:"upstreams"`
}

// The parts of the example's other objects the checks read.
type (
	inferencePool struct {
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			Selector    selector `yaml:"selector"`
			TargetPorts []struct {
				Number int `yaml:"number"`
			} `yaml:"targetPorts"`
			EndpointPickerRef struct {
				Kind string `yaml:"kind"`
				Name string `yaml:"name"`
				Port struct {
					Number int `yaml:"number"`
				} `yaml:"port"`
				FailureMode string `yaml:"failureMode"`
			} `yaml:"endpointPickerRef"`
		} `yaml:"spec"`
	}
	backendRef struct {
		Group string `yaml:"group"`
		Kind  string `yaml:"kind"`
		Name  string `yaml:"name"`
	}
	rbacRole struct {
		Rules []struct {
			APIGroups []string `yaml:"apiGroups"`
			Resources []string `yaml:"resources"`
			Verbs     []string `yaml:"verbs"`
		} `yaml:"rules"`
	}
	rbacBinding struct {
		RoleRef struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"roleRef"`
		Subjects []struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"subjects"`
	}
	httpRoute struct {
		Spec struct {
			ParentRefs []struct {
				Kind string `yaml:"kind"`
				Name string `yaml:"name"`
			} `yaml:"parentRefs"`
			Rules []struct {
				BackendRefs []backendRef `yaml:"backendRefs"`
			} `yaml:"rules"`
		} `yaml:"spec"`
	}
)

// TestInferenceGatewayAgrees checks what a schema cannot: that the picker's
// Deployment, policy, Service, RBAC, InferencePool and HTTPRoute fit
// together, and that each gateway's settings raise the picker's circuit
// breaker above Envoy's default and match the picker's TLS.
func TestInferenceGatewayAgrees(t *testing.T) {
	t.Parallel()
	kustomize := lookTool(t, "kustomize", "scripts/install/kustomize.sh")
	for _, tt := range inferenceGatewayBuilds {
		t.Run(tt.dir, func(t *testing.T) {
			t.Parallel()
			objs := decodeObjects(t, kustomizeBuild(t, kustomize, tt.dir))
			checkPicker(t, objs)
			if dr := objs["DestinationRule/gatekeeper-epp"]; dr != nil {
				checkDestinationRule(t, objs, dr)
			}
			if ep := objs["EnvoyProxy/inference-gateway"]; ep != nil {
				checkEnvoyProxy(t, objs, ep)
			}
			if gw := objs["Gateway/inference-gateway"]; gw != nil && gw["spec"] == nil {
				t.Errorf("Gateway inference-gateway has no spec")
			}
		})
	}
}

// checkPicker checks the base's objects against each other.
func checkPicker(t *testing.T, objs map[string]map[string]any) {
	t.Helper()
	var (
		d       deployment
		svc     service
		pool    inferencePool
		role    rbacRole
		binding rbacBinding
		route   httpRoute
		policy  eppPolicy
	)
	decodeInto(t, objs["Deployment/gatekeeper-epp"], &d)
	decodeInto(t, objs["Service/gatekeeper-epp"], &svc)
	decodeInto(t, objs["InferencePool/vllm-llama3-8b"], &pool)
	decodeInto(t, objs["Role/gatekeeper-epp"], &role)
	decodeInto(t, objs["RoleBinding/gatekeeper-epp"], &binding)
	decodeInto(t, objs["HTTPRoute/llm-route"], &route)
	text, _ := lookup(objs["ConfigMap/gatekeeper-epp-policy"], "data", "config.yaml").(string)
	if err := yaml.Unmarshal([]byte(text), &policy); err != nil || policy.EndpointPicker == nil || len(policy.Upstreams) != 1 {
		t.Fatalf("ConfigMap gatekeeper-epp-policy: config.yaml = %v, endpoint_picker %v, %d upstreams; want an endpoint_picker and one upstream",
			err, policy.EndpointPicker != nil, len(policy.Upstreams))
	}
	if hl := policy.EndpointPicker.HealthListen; hl == "" || hl == config.PickerHealthOff {
		t.Fatalf("ConfigMap gatekeeper-epp-policy: endpoint_picker.health_listen = %q, want it set explicitly to the port the probes use", hl)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment gatekeeper-epp: %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	port := func(name string) int {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		return -1
	}
	svcPort := func(number int) *servicePort {
		for i, p := range svc.Spec.Ports {
			if p.Port == number {
				return &svc.Spec.Ports[i]
			}
		}
		return nil
	}
	listen := listenPort(t, policy.EndpointPicker.Listen)
	health := listenPort(t, policy.EndpointPicker.HealthListen)
	up := policy.Upstreams[0]
	ref := pool.Spec.EndpointPickerRef
	picker := svcPort(ref.Port.Number)
	// The probes dial the plaintext health listener: kubelet's gRPC probes
	// speak no TLS, and endpoint_picker.listen serves it.
	grpcProbe := func(p *probe, service string) bool {
		return p != nil && p.GRPC != nil && p.GRPC.Port == health && p.GRPC.Service != nil && *p.GRPC.Service == service && p.GRPC.Mode == ""
	}
	grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second
	preStop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	drain, errDrain := time.ParseDuration(policy.Server.DrainDelay)
	shutdown, errShutdown := time.ParseDuration(policy.Server.ShutdownTimeout)
	tlsMount := ""
	if tls := policy.EndpointPicker.TLS; tls != nil {
		tlsMount = filepath.Dir(tls.CertFile)
	}
	tests := []struct {
		name string
		ok   bool
	}{
		{"endpoint_picker.listen is the container's grpc port, the Inference Extension's 9002",
			port("grpc") == listen && listen == listenPort(t, config.DefaultPickerListen)},
		{"endpoint_picker.health_listen is the container's health port, reachable from kubelet, apart from the grpc and metrics ports",
			port("health") == health && !isLoopback(policy.EndpointPicker.HealthListen) && health != listen && health != port("metrics")},
		{"the Service leaves the health port out: kubelet probes the pod's IP", !slices.ContainsFunc(svc.Spec.Ports, func(p servicePort) bool {
			return p.TargetPort == "health" || p.Port == health
		})},
		{"server.admin_listen is the container's metrics port, reachable from outside the pod",
			port("metrics") == listenPort(t, policy.Server.AdminListen) && !isLoopback(policy.Server.AdminListen)},
		{"the InferencePool's endpointPickerRef is the Service's port 9002, which targets the grpc port",
			ref.Kind == "Service" && ref.Name == svc.Metadata.Name && ref.Port.Number == listen && picker != nil && picker.TargetPort == "grpc"},
		{"the picker's Service port is named grpc-ext-proc with appProtocol http2, as the reference's",
			picker != nil && picker.Name == "grpc-ext-proc" && picker.AppProtocol == "http2"},
		{"the Service has a metrics port on the metrics container port", slices.ContainsFunc(svc.Spec.Ports, func(p servicePort) bool {
			return p.Name == "metrics" && port(p.TargetPort) > 0
		})},
		{"the InferencePool fails closed: an unreachable picker admits nothing", ref.FailureMode == "FailClose"},
		{"the policy's upstream is the InferencePool, in gatekeeper's namespace",
			up.InferencePool != nil && up.InferencePool.Name == pool.Metadata.Name && up.InferencePool.Namespace == ""},
		{"the upstream's url and sources name the pod placeholder host", strings.HasPrefix(up.URL, "http://pod") &&
			len(up.Sources) > 0 && strings.HasPrefix(up.Sources[0].URL, "http://pod:"+strconv.Itoa(pool.Spec.TargetPorts[0].Number)+"/")},
		{"the InferencePool does not select gatekeeper's own pods", !subset(pool.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels)},
		{"the HTTPRoute sends to the InferencePool", len(route.Spec.Rules) == 1 && len(route.Spec.Rules[0].BackendRefs) == 1 &&
			route.Spec.Rules[0].BackendRefs[0] == backendRef{"inference.networking.k8s.io", "InferencePool", pool.Metadata.Name}},
		{"the HTTPRoute's parent is the Gateway inference-gateway", len(route.Spec.ParentRefs) == 1 &&
			route.Spec.ParentRefs[0].Kind == "Gateway" && route.Spec.ParentRefs[0].Name == "inference-gateway"},
		{"startup and liveness probes: gRPC health service liveness on endpoint_picker.health_listen, plaintext",
			grpcProbe(c.StartupProbe, "liveness") && grpcProbe(c.LivenessProbe, "liveness")},
		{"readiness probe: gRPC health service readiness on endpoint_picker.health_listen, plaintext", grpcProbe(c.ReadinessProbe, "readiness")},
		{"readiness notices a drain within drain_delay", errDrain == nil && c.ReadinessProbe != nil &&
			time.Duration(c.ReadinessProbe.PeriodSeconds*max(c.ReadinessProbe.FailureThreshold, 1))*time.Second <= drain},
		{"terminationGracePeriodSeconds covers preStop + drain_delay + shutdown_timeout + 5s",
			errDrain == nil && errShutdown == nil && preStop > 0 && grace >= preStop+drain+shutdown+5*time.Second},
		{"the pod runs as the ServiceAccount the RoleBinding binds, with its token mounted",
			pod.ServiceAccountName != "" && pod.AutomountServiceAccountToken != nil && *pod.AutomountServiceAccountToken &&
				len(binding.Subjects) == 1 && binding.Subjects[0].Kind == "ServiceAccount" && binding.Subjects[0].Name == pod.ServiceAccountName &&
				objs["ServiceAccount/"+pod.ServiceAccountName] != nil},
		{"the RoleBinding binds the Role", binding.RoleRef.Kind == "Role" && objs["Role/"+binding.RoleRef.Name] != nil},
		{"the Role reads inferencepools and pods, nothing more", roleReadsOnly(role, map[string]string{
			"inference.networking.k8s.io/inferencepools": "get,list,watch", "/pods": "get,list,watch"})},
		{"endpoint_picker.tls's files are in a Secret mounted beside the policy, not inside it",
			tlsMount != "" && filepath.Dir(policy.EndpointPicker.TLS.KeyFile) == tlsMount &&
				!strings.HasPrefix(tlsMount+"/", mountedPolicy(c.Args)+"/") && mountIsSecret(d, c, tlsMount)},
		{"the policy is mounted as a directory (no subPath) at -config's folder", slices.ContainsFunc(c.VolumeMounts, func(m volumeMount) bool {
			return m.MountPath == mountedPolicy(c.Args) && m.SubPath == "" && volumeIsConfigMap(d, m.Name, "gatekeeper-epp-policy")
		})},
		{"one replica", d.Spec.Replicas == 1},
		{"image is the Dockerfile's build", c.Image == "gatekeeper:latest"},
		{"runs as non-root", pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot && pod.SecurityContext.RunAsUser == dockerfileUser(t)},
		{"seccomp RuntimeDefault", pod.SecurityContext.SeccompProfile.Type == "RuntimeDefault"},
		{"read-only root filesystem, no privilege escalation, all capabilities dropped",
			c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem &&
				c.SecurityContext.AllowPrivilegeEscalation != nil && !*c.SecurityContext.AllowPrivilegeEscalation &&
				slices.Equal(c.SecurityContext.Capabilities.Drop, []string{"ALL"})},
		{"cpu and memory requests, memory limit", c.Resources.Requests["cpu"] != "" && c.Resources.Requests["memory"] != "" && c.Resources.Limits["memory"] != ""},
		{"the Service selects the pods", len(svc.Spec.Selector) > 0 && subset(svc.Spec.Selector, d.Spec.Template.Metadata.Labels)},
	}
	for _, tt := range tests {
		if !tt.ok {
			t.Errorf("inference-gateway: want %s", tt.name)
		}
	}
}

// roleReadsOnly reports whether role grants exactly want: "group/resource"
// to its verbs, comma-separated.
func roleReadsOnly(role rbacRole, want map[string]string) bool {
	got := map[string]string{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got[g+"/"+res] = strings.Join(slices.Sorted(slices.Values(r.Verbs)), ",")
			}
		}
	}
	return maps.Equal(got, want)
}

// mountIsSecret reports whether dir is a volume mount of a Secret.
func mountIsSecret(d deployment, c container, dir string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name {
				return v.Secret != nil && v.Secret.SecretName != ""
			}
		}
	}
	return false
}

// checkDestinationRule: Istio's rule for the picker's Service lets more
// than Envoy's default of concurrent streams through, and originates TLS
// exactly when the picker serves it.
func checkDestinationRule(t *testing.T, objs map[string]map[string]any, dr map[string]any) {
	t.Helper()
	var policy eppPolicy
	text, _ := lookup(objs["ConfigMap/gatekeeper-epp-policy"], "data", "config.yaml").(string)
	if err := yaml.Unmarshal([]byte(text), &policy); err != nil || policy.EndpointPicker == nil {
		t.Fatalf("the picker's policy: %v", err)
	}
	maxRequests, _ := lookup(dr, "spec", "trafficPolicy", "connectionPool", "http", "http2MaxRequests").(int)
	mode, _ := lookup(dr, "spec", "trafficPolicy", "tls", "mode").(string)
	if host := lookup(dr, "spec", "host"); host != "gatekeeper-epp" {
		t.Errorf("DestinationRule host = %v, want the picker's Service gatekeeper-epp", host)
	}
	if maxRequests <= envoyDefaultMaxRequests {
		t.Errorf("DestinationRule connectionPool.http.http2MaxRequests = %d, want above Envoy's default %d", maxRequests, envoyDefaultMaxRequests)
	}
	if want := map[bool]string{true: "SIMPLE", false: ""}[policy.EndpointPicker.TLS != nil]; mode != want {
		t.Errorf("DestinationRule tls.mode = %q, want %q (endpoint_picker.tls set: %v)", mode, want, policy.EndpointPicker.TLS != nil)
	}
}

// checkEnvoyProxy: the runtime keys raise the circuit breaker of the
// cluster Envoy AI Gateway builds for this pool's picker, and the Gateway
// uses this EnvoyProxy.
func checkEnvoyProxy(t *testing.T, objs map[string]map[string]any, ep map[string]any) {
	t.Helper()
	var pool inferencePool
	decodeInto(t, objs["InferencePool/vllm-llama3-8b"], &pool)
	// Envoy AI Gateway's name for the picker's cluster
	// (internal/extensionserver: clusterNameForInferencePool), in the
	// namespace the example is applied in (default).
	cluster := fmt.Sprintf("envoy.clusters.endpointpicker_%s_%s_ext_proc", pool.Metadata.Name, "default")
	prefix := "/layered_runtime/layers/0/static_layer/circuit_breakers." + cluster + ".default."
	got := map[string]int{}
	patches, _ := lookup(ep, "spec", "bootstrap", "jsonPatches").([]any)
	for _, p := range patches {
		path, _ := lookup(p, "path").(string)
		if setting, ok := strings.CutPrefix(path, prefix); ok && lookup(p, "op") == "add" {
			got[setting], _ = lookup(p, "value").(int)
		}
	}
	for _, setting := range []string{"max_requests", "max_pending_requests", "max_connections"} {
		if got[setting] <= envoyDefaultMaxRequests {
			t.Errorf("EnvoyProxy runtime circuit_breakers.%s.default.%s = %d, want above Envoy's default %d", cluster, setting, got[setting], envoyDefaultMaxRequests)
		}
	}
	if lookup(ep, "spec", "bootstrap", "type") != "JSONPatch" {
		t.Errorf("EnvoyProxy bootstrap.type = %v, want JSONPatch", lookup(ep, "spec", "bootstrap", "type"))
	}
	ref := lookup(objs["Gateway/inference-gateway"], "spec", "infrastructure", "parametersRef")
	if lookup(ref, "kind") != "EnvoyProxy" || lookup(ref, "group") != "gateway.envoyproxy.io" || lookup(ref, "name") != lookup(ep, "metadata", "name") {
		t.Errorf("Gateway inference-gateway infrastructure.parametersRef = %v, want the EnvoyProxy %v", ref, lookup(ep, "metadata", "name"))
	}
}

// kustomizeBuild builds one of the example's kustomizations.
func kustomizeBuild(t *testing.T, kustomize, dir string) string {
	t.Helper()
	built, err := runTool(t, 30*time.Second, nil, kustomize, "build", filepath.Join(inferenceGateway, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, built)
	}
	return built
}
