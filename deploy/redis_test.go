package deploy

import (
	"errors"
	"io"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// redisComponent is the optional kustomize component that runs a Redis for
// the replicas to share limits through (policy key cluster).
const redisComponent = "kubernetes/components/redis"

// The parts of the component's manifests the tests read.
type (
	tcpProbe struct {
		TCPSocket *struct {
			Port string `yaml:"port"`
		} `yaml:"tcpSocket"`
	}
	redisDeployment struct {
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			Replicas int `yaml:"replicas"`
			Strategy struct {
				Type string `yaml:"type"`
			} `yaml:"strategy"`
			Selector selector `yaml:"selector"`
			Template struct {
				Metadata meta `yaml:"metadata"`
				Spec     struct {
					AutomountServiceAccountToken *bool       `yaml:"automountServiceAccountToken"`
					SecurityContext              podSecurity `yaml:"securityContext"`
					Containers                   []struct {
						Image           string            `yaml:"image"`
						Args            []string          `yaml:"args"`
						Ports           []containerPort   `yaml:"ports"`
						ReadinessProbe  *tcpProbe         `yaml:"readinessProbe"`
						LivenessProbe   *tcpProbe         `yaml:"livenessProbe"`
						Resources       resources         `yaml:"resources"`
						SecurityContext containerSecurity `yaml:"securityContext"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	component struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Resources  []string `yaml:"resources"`
		Patches    []struct {
			Path string `yaml:"path"`
		} `yaml:"patches"`
	}
)

// TestRedisComponentListsEveryFile: every manifest in the component's folder
// is a resource or a patch of it, so none is silently left out.
func TestRedisComponentListsEveryFile(t *testing.T) {
	t.Parallel()
	var k component
	readYAML(t, filepath.Join(redisComponent, "kustomization.yaml"), &k)
	if k.APIVersion != "kustomize.config.k8s.io/v1alpha1" || k.Kind != "Component" {
		t.Errorf("%s/kustomization.yaml is %s %s, want a kustomize.config.k8s.io/v1alpha1 Component", redisComponent, k.APIVersion, k.Kind)
	}
	listed := slices.Clone(k.Resources)
	for _, p := range k.Patches {
		listed = append(listed, p.Path)
	}
	onDisk, err := filepath.Glob(filepath.Join(redisComponent, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range onDisk {
		if b := filepath.Base(p); b != "kustomization.yaml" {
			names = append(names, b)
		}
	}
	slices.Sort(listed)
	slices.Sort(names)
	if !slices.Equal(listed, names) {
		t.Errorf("%s lists %v, want every manifest %v", redisComponent, listed, names)
	}
}

// TestRedisComponentAgrees checks what a schema cannot: the component's
// policy is the base policy plus cluster, its url names the component's
// Service and port, the Redis Deployment is locked down like gatekeeper's,
// and no gatekeeper selector picks up the Redis objects.
func TestRedisComponentAgrees(t *testing.T) {
	t.Parallel()
	var (
		base, patched configMap
		rd            redisDeployment
		rsvc          service
		gk            deployment
		gsvc          service
		pdb           disruptionBudget
		sm            serviceMonitor
	)
	readYAML(t, "kubernetes/configmap.yaml", &base)
	readYAML(t, filepath.Join(redisComponent, "policy.yaml"), &patched)
	readYAML(t, filepath.Join(redisComponent, "redis-deployment.yaml"), &rd)
	readYAML(t, filepath.Join(redisComponent, "redis-service.yaml"), &rsvc)
	readYAML(t, "kubernetes/deployment.yaml", &gk)
	readYAML(t, "kubernetes/service.yaml", &gsvc)
	readYAML(t, filepath.Join(redisComponent, "poddisruptionbudget.yaml"), &pdb)
	var two deployment
	readYAML(t, filepath.Join(redisComponent, "replicas.yaml"), &two)
	readYAML(t, "kubernetes/servicemonitor.yaml", &sm)

	if patched.Metadata.Name != base.Metadata.Name {
		t.Fatalf("policy.yaml patches ConfigMap %q, want %q", patched.Metadata.Name, base.Metadata.Name)
	}
	baseCfg, err := config.Parse([]byte(base.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("config.Parse(configmap.yaml) = %v", err)
	}
	cfg := clusterPolicy(t, patched, "policy.yaml")
	if d := config.Diff(baseCfg, cfg); !slices.Equal(d, []string{"cluster"}) {
		t.Errorf("policy.yaml differs from configmap.yaml in %v, want only [cluster]: make the same edit in both", d)
	}

	if len(rd.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("redis-deployment.yaml: %d containers, want 1", len(rd.Spec.Template.Spec.Containers))
	}
	pod := rd.Spec.Template.Spec
	c := pod.Containers[0]
	port := func(name string) int {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		return -1
	}
	u, err := url.Parse(cfg.Cluster.Redis.URL)
	if err != nil {
		t.Fatal(err)
	}
	urlPort, _ := strconv.Atoi(u.Port())
	tcp := func(p *tcpProbe) bool { return p != nil && p.TCPSocket != nil && port(p.TCPSocket.Port) > 0 }
	gkPods := gk.Spec.Template.Metadata.Labels
	redisPods := rd.Spec.Template.Metadata.Labels
	_, tag, _ := strings.Cut(c.Image, ":")

	tests := []struct {
		name string
		ok   bool
	}{
		{"cluster.redis.url's host is the Redis Service", u.Hostname() == rsvc.Metadata.Name},
		{"cluster.redis.url's port is a Service port that targets the container", slices.ContainsFunc(rsvc.Spec.Ports, func(p servicePort) bool {
			return p.Port == urlPort && port(p.TargetPort) > 0
		})},
		{"one Redis, replaced (never two behind the Service)", rd.Spec.Replicas == 1 && rd.Spec.Strategy.Type == "Recreate"},
		{"soft state: --save \"\" and --appendonly no", slices.Contains(c.Args, "redis-server") &&
			argFollowedBy(c.Args, "--save", "") && argFollowedBy(c.Args, "--appendonly", "no")},
		{"image has a pinned version tag", tag != "" && tag != "latest" && strings.ContainsAny(tag[:1], "0123456789")},
		{"readiness and liveness probe the Redis port over TCP", tcp(c.ReadinessProbe) && tcp(c.LivenessProbe)},
		{"cpu and memory requests and limits", c.Resources.Requests["cpu"] != "" && c.Resources.Requests["memory"] != "" &&
			c.Resources.Limits["cpu"] != "" && c.Resources.Limits["memory"] != ""},
		{"runs as non-root", pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot && pod.SecurityContext.RunAsUser > 0},
		{"seccomp RuntimeDefault", pod.SecurityContext.SeccompProfile.Type == "RuntimeDefault"},
		{"no service-account token", pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken},
		{"read-only root filesystem", c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem},
		{"no privilege escalation", c.SecurityContext.AllowPrivilegeEscalation != nil && !*c.SecurityContext.AllowPrivilegeEscalation},
		{"all capabilities dropped", slices.Equal(c.SecurityContext.Capabilities.Drop, []string{"ALL"})},
		{"Deployment selector matches its pods", len(rd.Spec.Selector.MatchLabels) > 0 && subset(rd.Spec.Selector.MatchLabels, redisPods)},
		{"Redis Service selects the Redis pods only", len(rsvc.Spec.Selector) > 0 && subset(rsvc.Spec.Selector, redisPods) && !subset(rsvc.Spec.Selector, gkPods)},
		{"gatekeeper's Deployment, Service and PodDisruptionBudget leave the Redis pods alone",
			!subset(gk.Spec.Selector.MatchLabels, redisPods) && !subset(gsvc.Spec.Selector, redisPods) && !subset(pdb.Spec.Selector.MatchLabels, redisPods)},
		{"gatekeeper's ServiceMonitor leaves the Redis Service alone", !subset(sm.Spec.Selector.MatchLabels, rsvc.Metadata.Labels)},
		{"two or more gatekeeper replicas, now that they share", two.Spec.Replicas >= 2},
		{"PodDisruptionBudget selects gatekeeper's pods", subset(pdb.Spec.Selector.MatchLabels, gkPods)},
		{"PodDisruptionBudget leaves room to evict", pdb.Spec.MinAvailable >= 1 && pdb.Spec.MinAvailable < two.Spec.Replicas},
	}
	for _, tt := range tests {
		if !tt.ok {
			t.Errorf("redis component: want %s", tt.name)
		}
	}
}

// TestKustomizeRedisComponent builds an overlay that turns the component on
// (testdata/redis), as a user's would, validates the output with
// kubeconform and checks that the policy it renders shares through the
// component's Redis.
func TestKustomizeRedisComponent(t *testing.T) {
	t.Parallel()
	kustomize := lookTool(t, "kustomize", "scripts/install/kustomize.sh")
	kubeconform := lookTool(t, "kubeconform", "scripts/install/kubeconform.sh")
	built, err := runTool(t, 30*time.Second, nil, kustomize, "build", "testdata/redis")
	if err != nil {
		t.Fatalf("kustomize build testdata/redis: %v\n%s", err, built)
	}
	out, err := runTool(t, 30*time.Second, []byte(built), kubeconform, "-strict", "-summary", "-schema-location", schemaLocation(t), "-")
	if err != nil {
		t.Errorf("kubeconform on kustomize's output: %v\n%s", err, out)
	}
	dec := yaml.NewDecoder(strings.NewReader(built))
	var (
		objects []string
		policy  *configMap
		redis   *service
		gk      *deployment
	)
	for {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("kustomize output: %v", err)
		}
		var obj struct {
			Kind     string `yaml:"kind"`
			Metadata meta   `yaml:"metadata"`
		}
		if err := node.Decode(&obj); err != nil {
			t.Fatalf("kustomize output: %v", err)
		}
		objects = append(objects, obj.Kind+"/"+obj.Metadata.Name)
		if obj.Metadata.Labels["app.kubernetes.io/part-of"] != "gatekeeper" {
			t.Errorf("%s %s: labels %v, want app.kubernetes.io/part-of=gatekeeper", obj.Kind, obj.Metadata.Name, obj.Metadata.Labels)
		}
		switch obj.Kind + "/" + obj.Metadata.Name {
		case "ConfigMap/gatekeeper-policy":
			policy = new(configMap)
			if err := node.Decode(policy); err != nil {
				t.Fatal(err)
			}
		case "Deployment/gatekeeper":
			gk = new(deployment)
			if err := node.Decode(gk); err != nil {
				t.Fatal(err)
			}
		case "Service/gatekeeper-redis":
			redis = new(service)
			if err := node.Decode(redis); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := len(manifests(t)) + 3; len(objects) != want || !slices.Contains(objects, "Deployment/gatekeeper-redis") || redis == nil ||
		!slices.Contains(objects, "PodDisruptionBudget/gatekeeper") {
		t.Errorf("kustomize build = %v, want the %d base objects plus Deployment and Service gatekeeper-redis and a PodDisruptionBudget", objects, want-3)
	}
	if gk == nil || gk.Spec.Replicas < 2 {
		t.Errorf("the rendered gatekeeper Deployment = %+v, want two replicas or more", gk)
	}
	if policy == nil {
		t.Fatalf("kustomize build = %v, no ConfigMap gatekeeper-policy", objects)
	}
	cfg := clusterPolicy(t, *policy, "the rendered ConfigMap")
	if got, want := cfg.Cluster.Redis.URL, "redis://gatekeeper-redis:6379/0"; got != want {
		t.Errorf("rendered cluster.redis.url = %q, want %q", got, want)
	}
	if policy.Metadata.Labels["app.kubernetes.io/name"] != "gatekeeper" {
		t.Errorf("the patch lost the ConfigMap's labels: %v", policy.Metadata.Labels)
	}
}

// clusterPolicy parses a ConfigMap's config.yaml and returns it, failing the
// test unless it is valid and has a cluster section.
func clusterPolicy(t *testing.T, cm configMap, what string) *config.Config {
	t.Helper()
	text, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatalf("%s: no data key config.yaml", what)
	}
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatalf("config.Parse(%s's config.yaml) = %v", what, err)
	}
	if cfg.Cluster == nil || cfg.Cluster.Redis.URL == "" {
		t.Fatalf("%s's config.yaml has no cluster.redis.url", what)
	}
	return cfg
}

// argFollowedBy reports whether args holds flag immediately followed by value.
func argFollowedBy(args []string, flag, value string) bool {
	i := slices.Index(args, flag)
	return i >= 0 && i+1 < len(args) && args[i+1] == value
}
