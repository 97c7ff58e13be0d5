package deploy

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// The parts of the manifests the tests read; kubeconform checks the rest.
type (
	meta struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
		// GRPC is a gRPC health probe (the endpoint picker's); nil for
		// the others.
		GRPC *struct {
			Port    int     `yaml:"port"`
			Service *string `yaml:"service"`
			Mode    string  `yaml:"mode"`
		} `yaml:"grpc"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	}
	container struct {
		Image          string          `yaml:"image"`
		Args           []string        `yaml:"args"`
		Ports          []containerPort `yaml:"ports"`
		StartupProbe   *probe          `yaml:"startupProbe"`
		LivenessProbe  *probe          `yaml:"livenessProbe"`
		ReadinessProbe *probe          `yaml:"readinessProbe"`
		Lifecycle      struct {
			PreStop struct {
				Sleep struct {
					Seconds int `yaml:"seconds"`
				} `yaml:"sleep"`
			} `yaml:"preStop"`
		} `yaml:"lifecycle"`
		Resources       resources         `yaml:"resources"`
		SecurityContext containerSecurity `yaml:"securityContext"`
		VolumeMounts    []volumeMount     `yaml:"volumeMounts"`
	}
	// The parts of a container and its pod that both components' tests read.
	containerPort struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	}
	resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	}
	containerSecurity struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	}
	podSecurity struct {
		RunAsNonRoot   *bool `yaml:"runAsNonRoot"`
		RunAsUser      int   `yaml:"runAsUser"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	}
	volumeMount struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	}
	podVolume struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
	}
	servicePort struct {
		Name        string `yaml:"name"`
		Port        int    `yaml:"port"`
		TargetPort  string `yaml:"targetPort"`
		AppProtocol string `yaml:"appProtocol"`
	}
	deployment struct {
		Spec struct {
			Replicas int      `yaml:"replicas"`
			Selector selector `yaml:"selector"`
			Template struct {
				Metadata meta `yaml:"metadata"`
				Spec     struct {
					TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
					SecurityContext               podSecurity `yaml:"securityContext"`
					Containers                    []container `yaml:"containers"`
					ServiceAccountName            string      `yaml:"serviceAccountName"`
					AutomountServiceAccountToken  *bool       `yaml:"automountServiceAccountToken"`
					Volumes                       []podVolume `yaml:"volumes"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	service struct {
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			Selector map[string]string `yaml:"selector"`
			Ports    []servicePort     `yaml:"ports"`
		} `yaml:"spec"`
	}
	configMap struct {
		Metadata meta              `yaml:"metadata"`
		Data     map[string]string `yaml:"data"`
	}
	disruptionBudget struct {
		Spec struct {
			MinAvailable int      `yaml:"minAvailable"`
			Selector     selector `yaml:"selector"`
		} `yaml:"spec"`
	}
	serviceMonitor struct {
		Spec struct {
			Selector  selector `yaml:"selector"`
			Endpoints []struct {
				Port string `yaml:"port"`
				Path string `yaml:"path"`
			} `yaml:"endpoints"`
		} `yaml:"spec"`
	}
)

// manifests are the files kustomization.yaml lists, relative to this folder.
func manifests(t *testing.T) []string {
	t.Helper()
	var k struct {
		Resources []string `yaml:"resources"`
	}
	readYAML(t, "kubernetes/kustomization.yaml", &k)
	files := make([]string, len(k.Resources))
	for i, r := range k.Resources {
		files[i] = filepath.Join("kubernetes", r)
	}
	return files
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	t.Parallel()
	onDisk, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	onDisk = slices.DeleteFunc(onDisk, func(p string) bool { return filepath.Base(p) == "kustomization.yaml" })
	listed := manifests(t)
	slices.Sort(onDisk)
	slices.Sort(listed)
	if !slices.Equal(listed, onDisk) {
		t.Errorf("kustomization.yaml resources = %v, want every manifest %v", listed, onDisk)
	}
}

// TestManifestsAgree checks what a schema cannot: that the Deployment, its
// policy, the Service and the ServiceMonitor fit together, that the policy
// itself is valid, and that the base runs one replica (replicas that share
// nothing would each add a whole window per vLLM pod).
func TestManifestsAgree(t *testing.T) {
	t.Parallel()
	var (
		d   deployment
		svc service
		cm  configMap
		sm  serviceMonitor
	)
	readYAML(t, "kubernetes/deployment.yaml", &d)
	readYAML(t, "kubernetes/service.yaml", &svc)
	readYAML(t, "kubernetes/configmap.yaml", &cm)
	readYAML(t, "kubernetes/servicemonitor.yaml", &sm)

	policy, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatalf("configmap.yaml: no data key config.yaml")
	}
	cfg, err := config.Parse([]byte(policy))
	if err != nil {
		t.Fatalf("config.Parse(configmap.yaml's config.yaml) = %v", err)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("deployment.yaml: %d containers, want 1", len(pod.Containers))
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
	svcPort := func(name string) bool {
		return slices.ContainsFunc(svc.Spec.Ports, func(p servicePort) bool {
			return p.Name == name && port(p.TargetPort) > 0
		})
	}
	grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second
	preStop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	const margin = 5 * time.Second
	needed := preStop + cfg.Server.DrainDelay + cfg.Server.ShutdownTimeout + margin
	policyDir := mountedPolicy(c.Args)

	tests := []struct {
		name string
		ok   bool
	}{
		{"terminationGracePeriodSeconds covers preStop + drain_delay + shutdown_timeout + 5s (" + needed.String() + ")", grace >= needed},
		{"preStop sleeps", preStop > 0},
		{"http port is server.listen's port", port("http") == listenPort(t, cfg.Server.Listen)},
		{"metrics port is server.admin_listen's port", port("metrics") == listenPort(t, cfg.Server.AdminListen)},
		{"server.admin_listen is reachable from outside the pod", !isLoopback(cfg.Server.AdminListen)},
		{"startup probe: /healthz on http", c.StartupProbe != nil && c.StartupProbe.HTTPGet.Path == "/healthz" && c.StartupProbe.HTTPGet.Port == "http"},
		{"liveness probe: /healthz on http", c.LivenessProbe != nil && c.LivenessProbe.HTTPGet.Path == "/healthz" && c.LivenessProbe.HTTPGet.Port == "http"},
		{"readiness probe: /readyz on http", c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet.Path == "/readyz" && c.ReadinessProbe.HTTPGet.Port == "http"},
		{"readiness notices a drain within drain_delay", c.ReadinessProbe != nil &&
			time.Duration(c.ReadinessProbe.PeriodSeconds*max(c.ReadinessProbe.FailureThreshold, 1))*time.Second <= cfg.Server.DrainDelay},
		{"policy is mounted as a directory (no subPath) at -config's folder", slices.ContainsFunc(c.VolumeMounts, func(m volumeMount) bool {
			return m.MountPath == policyDir && m.SubPath == "" && volumeIsConfigMap(d, m.Name, cm.Metadata.Name)
		})},
		{"-config names the ConfigMap's key", filepath.Base(configFlag(c.Args)) == "config.yaml"},
		{"image is the Dockerfile's build", c.Image == "gatekeeper:latest"},
		{"runs as non-root", pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot && pod.SecurityContext.RunAsUser == dockerfileUser(t)},
		{"seccomp RuntimeDefault", pod.SecurityContext.SeccompProfile.Type == "RuntimeDefault"},
		{"read-only root filesystem", c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem},
		{"no privilege escalation", c.SecurityContext.AllowPrivilegeEscalation != nil && !*c.SecurityContext.AllowPrivilegeEscalation},
		{"all capabilities dropped", slices.Equal(c.SecurityContext.Capabilities.Drop, []string{"ALL"})},
		{"cpu and memory requests, memory limit", c.Resources.Requests["cpu"] != "" && c.Resources.Requests["memory"] != "" && c.Resources.Limits["memory"] != ""},
		{"Deployment selector matches its pods", subset(d.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels)},
		{"Service selects the pods", len(svc.Spec.Selector) > 0 && subset(svc.Spec.Selector, d.Spec.Template.Metadata.Labels)},
		{"Service has http and metrics ports that target container ports", svcPort("http") && svcPort("metrics")},
		{"one replica: the policy has no cluster section to share windows through", d.Spec.Replicas == 1 && cfg.Cluster == nil},
		{"ServiceMonitor selects the Service", len(sm.Spec.Selector.MatchLabels) > 0 && subset(sm.Spec.Selector.MatchLabels, svc.Metadata.Labels)},
		{"ServiceMonitor scrapes /metrics on the metrics port", len(sm.Spec.Endpoints) == 1 && sm.Spec.Endpoints[0].Port == "metrics" && sm.Spec.Endpoints[0].Path == "/metrics"},
	}
	for _, tt := range tests {
		if !tt.ok {
			t.Errorf("manifests: want %s", tt.name)
		}
	}
}

// configFlag returns the value of -config in a container's args.
func configFlag(args []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "-config="); ok {
			return v
		}
		if a == "-config" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func mountedPolicy(args []string) string { return filepath.Dir(configFlag(args)) }

func volumeIsConfigMap(d deployment, volume, configMap string) bool {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == volume {
			return v.ConfigMap != nil && v.ConfigMap.Name == configMap
		}
	}
	return false
}

func listenPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, err := net.LookupPort("tcp", p)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return n
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func subset(sub, of map[string]string) bool {
	for k, v := range sub {
		if of[k] != v {
			return false
		}
	}
	return true
}

// dockerfileUser is the numeric user of the image's USER line.
func dockerfileUser(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if u, ok := strings.CutPrefix(strings.TrimSpace(line), "USER "); ok {
			u, _, _ = strings.Cut(u, ":")
			if n, err := strconv.Atoi(u); err == nil {
				return n
			}
		}
	}
	t.Fatal("Dockerfile: no numeric USER line")
	return 0
}
