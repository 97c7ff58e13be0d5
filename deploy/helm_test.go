package deploy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// chart is the Helm chart, relative to this folder.
const chart = "helm/gatekeeper"

// chartKubeVersion is the cluster version helm renders and lints for: the
// one the vendored schemas describe (schemas/gen/go.mod). Given explicitly,
// since a helm built by a plain go install defaults to 1.20, below the
// chart's kubeVersion.
const chartKubeVersion = "1.37.0"

// chartCase is one set of values the chart is linted and rendered with.
type chartCase struct {
	name string
	args []string // helm flags: --set ...
	// objects are the kind/name of every object it must render, in any order.
	objects []string
	// replicas is the Deployment's, and with redisURL set the policy's
	// cluster.replicas.
	replicas int
	// redisURL is the policy's cluster.redis.url; "" means no cluster section.
	redisURL string
	// passwordFile is the policy's cluster.redis.password_file.
	passwordFile string
	// goMemLimit is the container's GOMEMLIMIT; "" means unset, leaving
	// gatekeeper's own rule (memlimit: 90 % of the memory limit).
	goMemLimit string
	// goGC is the container's GOGC; "" means unset, leaving gatekeeper's
	// own floor under the heap goal (gcfloor).
	goGC string
	// picker, when set, is what endpointPicker asks for (checkChartPicker).
	picker *chartPicker
	// scalePool is the pool of gatekeeper_desired_replicas a ScaledObject
	// or HPA must scale on; "" means all.
	scalePool string
	// appProtocol is the Service's http port's, with policy.server.h2c.
	appProtocol string
}

// chartPicker is the endpoint picker a chartCase renders.
type chartPicker struct {
	// port and healthPort are endpointPicker's: ext_proc's and the
	// plaintext health listener's.
	port, healthPort int
	// pool and poolNamespace are endpointPicker.inferencePool's; pool ""
	// means none named (no RBAC, the values' upstreams).
	pool, poolNamespace string
	// tlsSecret is endpointPicker.tls.secretName; "" is plaintext.
	tlsSecret string
}

// chartCases cover the defaults and each switch: several replicas with our
// own Redis or an existing one, monitoring, the NetworkPolicy, the endpoint
// picker, and every option at once.
func chartCases() []chartCase {
	return []chartCase{
		{
			name:     "defaults",
			objects:  []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper"},
			replicas: 1,
		},
		{
			name: "our own Redis, two replicas",
			args: []string{"--set", "redis.enabled=true", "--set", "replicas=2", "--set", "goGC=100"},
			objects: []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper",
				"Deployment/gatekeeper-redis", "Service/gatekeeper-redis", "PodDisruptionBudget/gatekeeper"},
			replicas: 2,
			redisURL: "redis://gatekeeper-redis:6379/0",
			goGC:     "100",
		},
		{
			name: "an existing Redis with a password Secret, three replicas",
			args: []string{"--set", "redis.url=rediss://redis.example.internal:6380/0", "--set", "redis.existingSecret=gatekeeper-redis-auth",
				"--set", "replicas=3", "--set", "policy.cluster.key_prefix=gatekeeper-prod:",
				"--set", "policy.cluster.redis.ca_file=/etc/gatekeeper-redis/ca.crt", "--set", "goMemLimit=400MiB"},
			goMemLimit:   "400MiB",
			objects:      []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper", "PodDisruptionBudget/gatekeeper"},
			replicas:     3,
			redisURL:     "rediss://redis.example.internal:6380/0",
			passwordFile: "/etc/gatekeeper-redis/password",
		},
		{
			name:        "h2c for a gateway that speaks HTTP/2 to its backends",
			args:        []string{"--set", "policy.server.h2c=true"},
			objects:     []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper"},
			replicas:    1,
			appProtocol: "kubernetes.io/h2c",
		},
		{
			name: "monitoring on",
			args: []string{"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
				"--set", "metrics.dashboard.enabled=true"},
			objects: []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper",
				"ServiceMonitor/gatekeeper", "PrometheusRule/gatekeeper", "ConfigMap/gatekeeper-dashboard"},
			replicas: 1,
		},
		{
			name: "NetworkPolicy with our own Redis",
			args: []string{"--set", "networkPolicy.enabled=true", "--set", "redis.enabled=true", "--set", "replicas=2",
				"--set", "networkPolicy.admin.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
				"--set", "networkPolicy.admin.podSelector.matchLabels.app\\.kubernetes\\.io/name=prometheus"},
			objects: []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper",
				"Deployment/gatekeeper-redis", "Service/gatekeeper-redis", "PodDisruptionBudget/gatekeeper",
				"NetworkPolicy/gatekeeper", "NetworkPolicy/gatekeeper-redis"},
			replicas: 2,
			redisURL: "redis://gatekeeper-redis:6379/0",
		},
		{
			name: "endpoint picker of a pool, with TLS",
			args: []string{"--set", "endpointPicker.enabled=true", "--set", "endpointPicker.inferencePool.name=vllm-llama3-8b",
				"--set", "endpointPicker.tls.secretName=gatekeeper-epp-tls"},
			objects: []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper",
				"ServiceAccount/gatekeeper", "Role/gatekeeper", "RoleBinding/gatekeeper"},
			replicas: 1,
			picker:   &chartPicker{port: 9002, healthPort: 9003, pool: "vllm-llama3-8b", tlsSecret: "gatekeeper-epp-tls"},
		},
		{
			name: "endpoint picker without a pool, plaintext, on other ports",
			args: []string{"--set", "endpointPicker.enabled=true", "--set", "endpointPicker.port=9102",
				"--set", "endpointPicker.healthPort=9103"},
			objects:  []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper"},
			replicas: 1,
			picker:   &chartPicker{port: 9102, healthPort: 9103},
		},
		{
			name: "endpoint picker of a pool in another namespace, with the NetworkPolicy and Redis",
			args: []string{"--set", "endpointPicker.enabled=true", "--set", "endpointPicker.inferencePool.name=pool",
				"--set", "endpointPicker.inferencePool.namespace=models", "--set", "networkPolicy.enabled=true",
				"--set", "redis.enabled=true", "--set", "replicas=2"},
			objects: []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper",
				"ServiceAccount/gatekeeper", "Role/gatekeeper", "RoleBinding/gatekeeper",
				"Deployment/gatekeeper-redis", "Service/gatekeeper-redis", "PodDisruptionBudget/gatekeeper",
				"NetworkPolicy/gatekeeper", "NetworkPolicy/gatekeeper-redis"},
			replicas: 2,
			redisURL: "redis://gatekeeper-redis:6379/0",
			picker:   &chartPicker{port: 9002, healthPort: 9003, pool: "pool", poolNamespace: "models"},
		},
		{
			name: "an HPA on gatekeeper_desired_replicas",
			args: []string{"--set", "policy.scaling.pod_start_time=4m", "--set", "autoscaling.hpa.enabled=true"},
			objects: []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper",
				"HorizontalPodAutoscaler/gatekeeper-vllm"},
			replicas: 1,
		},
		{
			name: "KEDA on a model's pool",
			args: []string{"--set", "policy.scaling.pod_start_time=4m", "--set", "autoscaling.keda.enabled=true",
				"--set", "autoscaling.pool=meta-llama/Llama-3.1-8B-Instruct", "--set", "autoscaling.target.name=vllm-llama"},
			objects: []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper",
				"ScaledObject/gatekeeper-vllm-llama"},
			replicas:  1,
			scalePool: "meta-llama/Llama-3.1-8B-Instruct",
		},
		{
			name: "an HPA on a model's pool",
			args: []string{"--set", "policy.scaling.pod_start_time=4m", "--set", "autoscaling.hpa.enabled=true",
				"--set", "autoscaling.pool=qwen2.5-7b-instruct", "--set", "autoscaling.target.name=vllm-qwen"},
			objects: []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper",
				"HorizontalPodAutoscaler/gatekeeper-vllm-qwen"},
			replicas:  1,
			scalePool: "qwen2.5-7b-instruct",
		},
		{
			name: "everything on",
			args: []string{"-f", everythingValues},
			objects: []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper",
				"Deployment/gatekeeper-redis", "Service/gatekeeper-redis", "PodDisruptionBudget/gatekeeper",
				"NetworkPolicy/gatekeeper", "NetworkPolicy/gatekeeper-redis",
				"ServiceMonitor/gatekeeper", "PrometheusRule/gatekeeper", "ConfigMap/gatekeeper-dashboard",
				"ScaledObject/gatekeeper-vllm-llama3-8b"},
			replicas:   2,
			redisURL:   "redis://gatekeeper-redis:6379/0",
			goMemLimit: "400MiB",
			goGC:       "200",
		},
		{
			name: "everything on, as the endpoint picker of a pool with TLS",
			args: []string{"-f", everythingValues, "--set", "endpointPicker.enabled=true",
				"--set", "endpointPicker.inferencePool.name=vllm-llama3-8b", "--set", "endpointPicker.inferencePool.namespace=models",
				"--set", "endpointPicker.tls.secretName=gatekeeper-epp-tls"},
			objects: []string{"ConfigMap/gatekeeper-policy", "Deployment/gatekeeper", "Service/gatekeeper",
				"ServiceAccount/gatekeeper", "Role/gatekeeper", "RoleBinding/gatekeeper",
				"Deployment/gatekeeper-redis", "Service/gatekeeper-redis", "PodDisruptionBudget/gatekeeper",
				"NetworkPolicy/gatekeeper", "NetworkPolicy/gatekeeper-redis",
				"ServiceMonitor/gatekeeper", "PrometheusRule/gatekeeper", "ConfigMap/gatekeeper-dashboard",
				"ScaledObject/gatekeeper-vllm-llama3-8b"},
			replicas:   2,
			redisURL:   "redis://gatekeeper-redis:6379/0",
			goMemLimit: "400MiB",
			goGC:       "200",
			picker: &chartPicker{port: 9002, healthPort: 9003, pool: "vllm-llama3-8b", poolNamespace: "models",
				tlsSecret: "gatekeeper-epp-tls"},
		},
	}
}

// everythingValues switches on every option of the chart at once, so that
// kubeconform sees every kind and field it can render.
const everythingValues = "testdata/helm/everything.values.yaml"

// TestHelmLint runs helm lint --strict (which also checks the values
// against values.schema.json) with each set of values.
func TestHelmLint(t *testing.T) {
	t.Parallel()
	helm := lookTool(t, "helm", "scripts/install/helm.sh")
	for _, tt := range chartCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"lint", "--strict", "--kube-version", chartKubeVersion, chart}, tt.args...)
			if out, err := runTool(t, 60*time.Second, nil, helm, args...); err != nil {
				t.Errorf("helm %v: %v\n%s", args, err, out)
			}
		})
	}
}

// TestHelmTemplate renders the chart with each set of values, validates
// the output with kubeconform against the vendored schemas, and checks what
// a schema cannot: the objects rendered, that the policy passes
// config.Parse with the cluster section the values ask for, and that the
// Redis password Secret is mounted where password_file points.
func TestHelmTemplate(t *testing.T) {
	t.Parallel()
	helm := lookTool(t, "helm", "scripts/install/helm.sh")
	kubeconform := lookTool(t, "kubeconform", "scripts/install/kubeconform.sh")
	for _, tt := range chartCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			built := helmTemplate(t, helm, tt.args...)
			objs := decodeObjects(t, built)
			args := []string{"-strict", "-summary", "-schema-location", schemaLocation(t), "-"}
			if out, err := runTool(t, 30*time.Second, []byte(built), kubeconform, args...); err != nil {
				t.Errorf("kubeconform on helm template's output: %v\n%s", err, out)
			}

			got := slices.Sorted(maps.Keys(objs))
			want := slices.Sorted(slices.Values(tt.objects))
			if !slices.Equal(got, want) {
				t.Errorf("helm template %v renders %v, want %v", tt.args, got, want)
			}
			for key, obj := range objs {
				if lookup(obj, "metadata", "labels", "app.kubernetes.io/part-of") != "gatekeeper" {
					t.Errorf("%s: labels %v, want app.kubernetes.io/part-of=gatekeeper", key, lookup(obj, "metadata", "labels"))
				}
			}

			var d deployment
			decodeInto(t, objs["Deployment/gatekeeper"], &d)
			if d.Spec.Replicas != tt.replicas {
				t.Errorf("Deployment replicas = %d, want %d", d.Spec.Replicas, tt.replicas)
			}
			if tt.picker != nil {
				checkChartPicker(t, objs, tt)
			} else {
				checkChartPolicy(t, objs, tt, d)
			}
			if got := containerEnv(objs["Deployment/gatekeeper"], "GOMEMLIMIT"); got != tt.goMemLimit {
				t.Errorf("GOMEMLIMIT = %q, want %q", got, tt.goMemLimit)
			}
			if got := containerEnv(objs["Deployment/gatekeeper"], "GOGC"); got != tt.goGC {
				t.Errorf("GOGC = %q, want %q", got, tt.goGC)
			}
			checkMonitoring(t, objs)
			checkAutoscaling(t, objs, cmp.Or(tt.scalePool, "all"))
		})
	}
}

// checkChartPolicy checks a rendered proxy's policy: it passes
// config.Parse, with the cluster section the values ask for, and the Redis
// password Secret mounted where password_file points.
func checkChartPolicy(t *testing.T, objs map[string]map[string]any, tt chartCase, d deployment) {
	t.Helper()
	cfg := renderedPolicy(t, objs)
	switch {
	case tt.redisURL == "" && cfg.Cluster != nil:
		t.Errorf("policy has a cluster section %+v, want none without Redis", cfg.Cluster)
	case tt.redisURL != "" && cfg.Cluster == nil:
		t.Errorf("policy has no cluster section, want cluster.redis.url %q", tt.redisURL)
	case tt.redisURL != "":
		c := cfg.Cluster
		if c.Redis.URL != tt.redisURL || c.Replicas != tt.replicas || c.Redis.PasswordFile != tt.passwordFile {
			t.Errorf("policy cluster = url %q, replicas %d, password_file %q; want %q, %d, %q",
				c.Redis.URL, c.Replicas, c.Redis.PasswordFile, tt.redisURL, tt.replicas, tt.passwordFile)
		}
	}
	ports, _ := lookup(objs["Service/gatekeeper"], "spec", "ports").([]any)
	for _, p := range ports {
		if lookup(p, "name") != "http" {
			continue
		}
		if got, _ := lookup(p, "appProtocol").(string); got != tt.appProtocol || cfg.Server.H2C != (tt.appProtocol != "") {
			t.Errorf("the http port's appProtocol = %q with server.h2c %v, want %q", got, cfg.Server.H2C, tt.appProtocol)
		}
	}
	if tt.passwordFile != "" {
		c := d.Spec.Template.Spec.Containers[0]
		dir := filepath.Dir(tt.passwordFile)
		if !slices.ContainsFunc(c.VolumeMounts, func(m volumeMount) bool { return m.MountPath == dir && m.SubPath == "" }) {
			t.Errorf("gatekeeper's volumeMounts %+v, want the password Secret mounted at %s", c.VolumeMounts, dir)
		}
	}
}

// containerEnv is the value of an environment variable of a Deployment's
// first container; "" when it sets none.
func containerEnv(d map[string]any, name string) string {
	containers, _ := lookup(d, "spec", "template", "spec", "containers").([]any)
	if len(containers) == 0 {
		return ""
	}
	env, _ := lookup(containers[0], "env").([]any)
	for _, e := range env {
		if lookup(e, "name") == name {
			v, _ := lookup(e, "value").(string)
			return v
		}
	}
	return ""
}

// checkMonitoring checks the monitoring objects the chart rendered, if any:
// the ServiceMonitor selects gatekeeper's Service (not Redis's), the
// PrometheusRule holds the alert rules and the dashboard ConfigMap the
// dashboard, both as shipped in deploy/.
func checkMonitoring(t *testing.T, objs map[string]map[string]any) {
	t.Helper()
	if sm := objs["ServiceMonitor/gatekeeper"]; sm != nil {
		var m serviceMonitor
		var gk, redis service
		decodeInto(t, sm, &m)
		decodeInto(t, objs["Service/gatekeeper"], &gk)
		if r := objs["Service/gatekeeper-redis"]; r != nil {
			decodeInto(t, r, &redis)
		}
		sel := m.Spec.Selector.MatchLabels
		if len(sel) == 0 || !subset(sel, gk.Metadata.Labels) || (redis.Metadata.Name != "" && subset(sel, redis.Metadata.Labels)) {
			t.Errorf("ServiceMonitor selects %v, want gatekeeper's Service %v and not Redis's", sel, gk.Metadata.Labels)
		}
	}
	if rule := objs["PrometheusRule/gatekeeper"]; rule != nil {
		var want map[string]any
		readYAML(t, "prometheus/gatekeeper-rules.yaml", &want)
		for _, d := range valueDiff("spec", lookup(rule, "spec"), want) {
			t.Errorf("PrometheusRule %s (prometheus/gatekeeper-rules.yaml)", d)
		}
	}
	if cm := objs["ConfigMap/gatekeeper-dashboard"]; cm != nil {
		want, err := os.ReadFile("grafana/gatekeeper.json")
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := lookup(cm, "data", "gatekeeper.json").(string); got != strings.TrimSpace(string(want)) {
			t.Errorf("ConfigMap gatekeeper-dashboard's gatekeeper.json is not grafana/gatekeeper.json")
		}
	}
}

// TestHelmTemplateFails checks that values which would deploy something
// wrong stop rendering with a message that says what to change, whether
// values.schema.json or the chart's own checks (fail) catch them. What the
// schema refuses, helm lint --strict refuses too (lint reports a fail only
// as information), and so do install and upgrade, which validate the
// values as template does.
func TestHelmTemplateFails(t *testing.T) {
	t.Parallel()
	helm := lookTool(t, "helm", "scripts/install/helm.sh")
	tests := []struct {
		name    string
		args    []string
		wantErr string
		schema  bool // refused by values.schema.json, so by helm lint too
	}{
		{"several replicas without Redis", []string{"--set", "replicas=2"}, "replicas is 2 but there is no Redis", false},
		{"both scalers", []string{"--set", "policy.scaling.interval=15s", "--set", "autoscaling.keda.enabled=true", "--set", "autoscaling.hpa.enabled=true"},
			"two HPAs on one Deployment fight", false},
		{"a scaler without the signal", []string{"--set", "autoscaling.keda.enabled=true"}, "policy.scaling is not set", false},
		{"an HPA on a pool that is no label value", []string{"--set", "policy.scaling.interval=15s", "--set", "autoscaling.hpa.enabled=true",
			"--set", "autoscaling.pool=meta-llama/Llama-3.1-8B-Instruct"}, `autoscaling.pool "meta-llama/Llama-3.1-8B-Instruct" is not a Kubernetes label value`, false},
		{"our own Redis and an existing one", []string{"--set", "redis.enabled=true", "--set", "redis.url=redis://r:6379/0"}, "not both", false},
		{"a password Secret without redis.url", []string{"--set", "redis.existingSecret=auth"}, "redis.existingSecret is set without redis.url", false},
		{"a listener in the policy", []string{"--set", "policy.server.listen=:8081"}, "policy.server.listen is set by the chart from ports.http", false},
		{"cluster in the policy without Redis", []string{"--set", "policy.cluster.key_prefix=gk:"}, "policy.cluster is set but there is no Redis", false},
		{"cluster.replicas in the policy", []string{"--set", "redis.enabled=true", "--set", "policy.cluster.replicas=2"}, "policy.cluster.replicas is set by the chart", false},
		{"a PodDisruptionBudget that blocks every eviction", []string{"--set", "redis.enabled=true", "--set", "replicas=2",
			"--set", "podDisruptionBudget.minAvailable=2"}, "podDisruptionBudget.minAvailable is 2 with 2 replicas", false},
		{"a misspelt value", []string{"--set", "replica=2"}, "additional properties 'replica' not allowed", true},
		{"a GOMEMLIMIT the runtime does not read", []string{"--set", "goMemLimit=1GB"}, "/goMemLimit", true},
		{"a GOGC the runtime does not read", []string{"--set", "goGC=200%"}, "/goGC", true},
		{"no upstreams", []string{"--set", "policy.upstreams=null"}, "upstreams", true},
		{"an InferencePool without the endpoint picker", []string{"--set", "endpointPicker.inferencePool.name=pool"},
			"endpointPicker.inferencePool.name or endpointPicker.tls.secretName is set but endpointPicker.enabled is false", false},
		{"endpoint_picker in the policy", []string{"--set", "endpointPicker.enabled=true", "--set", "policy.endpoint_picker.listen=:9002"},
			"policy.endpoint_picker is set by the chart from endpointPicker", false},
		{"inference_pool in the pool's upstream", []string{"--set", "endpointPicker.enabled=true", "--set", "endpointPicker.upstream.inference_pool.name=pool"},
			"endpointPicker.upstream.inference_pool is set by the chart", false},
		{"a misspelt endpointPicker value", []string{"--set", "endpointPicker.pool=x"}, "additional properties 'pool' not allowed", true},
		{"the health port on the picker's port", []string{"--set", "endpointPicker.enabled=true", "--set", "endpointPicker.healthPort=9002"},
			"endpointPicker.healthPort is 9002, the same as endpointPicker.port or ports.admin", false},
		{"the health port on the admin port", []string{"--set", "endpointPicker.enabled=true", "--set", "endpointPicker.healthPort=9090"},
			"endpointPicker.healthPort is 9090, the same as endpointPicker.port or ports.admin", false},
		{"a health port out of range", []string{"--set", "endpointPicker.enabled=true", "--set", "endpointPicker.healthPort=70000"},
			"/endpointPicker/healthPort", true},
		{"a pool name Kubernetes refuses", []string{"--set", "endpointPicker.enabled=true", "--set", "endpointPicker.inferencePool.name=Pool_1"},
			"/endpointPicker/inferencePool/name", true},
		// The policy's keys, by values.schema.json's policy (docs/config.schema.json's).
		{"a misspelt policy key", []string{"--set", "policy.fast_breaker.qsp=80"}, "at '/policy/fast_breaker': additional properties 'qsp' not allowed", true},
		{"a misspelt policy section", []string{"--set", "policy.fastbreaker.qps=80"}, "at '/policy': additional properties 'fastbreaker' not allowed", true},
		{"a misspelt key of a policy upstream", []string{"--set", "policy.upstreams[0].max_inflite=64"},
			"at '/policy/upstreams/0': additional properties 'max_inflite' not allowed", true},
		{"a mistyped policy value", []string{"--set", "policy.fast_breaker.qps=fast"}, "at '/policy/fast_breaker/qps': got string, want number", true},
		{"a policy mode gatekeeper does not know", []string{"--set", "policy.mode=enforcing"}, "at '/policy/mode'", true},
		{"a policy duration gatekeeper cannot read", []string{"--set", "policy.server.drain_delay=5 seconds"}, "at '/policy/server/drain_delay'", true},
		{"a misspelt key of the pool's upstream", []string{"--set", "endpointPicker.enabled=true", "--set", "endpointPicker.upstream.max_inflite=64"},
			"at '/endpointPicker/upstream': additional properties 'max_inflite' not allowed", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"template", "gatekeeper", chart, "--kube-version", chartKubeVersion}, tt.args...)
			out, err := runTool(t, 60*time.Second, nil, helm, args...)
			switch {
			case err == nil:
				t.Errorf("helm %v rendered, want an error with %q", args, tt.wantErr)
			case !strings.Contains(out, tt.wantErr):
				t.Errorf("helm %v = %s, want an error with %q", args, out, tt.wantErr)
			}
			if !tt.schema {
				return
			}
			args = append([]string{"lint", "--strict", "--kube-version", chartKubeVersion, chart}, tt.args...)
			out, err = runTool(t, 60*time.Second, nil, helm, args...)
			switch {
			case err == nil:
				t.Errorf("helm %v passed, want an error with %q", args, tt.wantErr)
			case !strings.Contains(out, tt.wantErr):
				t.Errorf("helm %v = %s, want an error with %q", args, out, tt.wantErr)
			}
		})
	}
}

// TestHelmMatchesKustomize keeps the chart and the kustomize manifests in
// agreement: the chart with default values (release "gatekeeper") against
// `kustomize build kubernetes`, with our own Redis and two replicas
// against the overlay testdata/redis (components/redis), and as the
// endpoint picker of a pool with TLS against inference-gateway/base (the
// Deployment's service account and the Role's rules compared too).
// Compared, as decoded YAML:
//
//   - the gatekeeper Deployment's replicas and update strategy; its whole
//     container (image, args, ports, env — neither sets GOMEMLIMIT —
//     probes, preStop, resources, securityContext, mounts); the pod's
//     securityContext, grace period, service-account token and volumes;
//   - the policy in the ConfigMap, as YAML values (comments and key order
//     aside), which includes the cluster section with Redis;
//   - the Services' type and ports; the ServiceMonitor's endpoints (the
//     chart's is off by default, so it is rendered with it on);
//   - with Redis: the Redis Deployment's replicas, strategy and whole pod
//     spec, and the PodDisruptionBudget's minAvailable.
//
// Not compared: labels and selectors (the chart adds the release's
// instance and Helm's labels, so the topology spread's selector differs
// too), annotations (the chart's cluster checksum) and comments.
func TestHelmMatchesKustomize(t *testing.T) {
	t.Parallel()
	helm := lookTool(t, "helm", "scripts/install/helm.sh")
	kustomize := lookTool(t, "kustomize", "scripts/install/kustomize.sh")
	gatekeeper := [][]string{
		{"spec", "replicas"},
		{"spec", "strategy"},
		{"spec", "template", "spec", "containers"},
		{"spec", "template", "spec", "securityContext"},
		{"spec", "template", "spec", "terminationGracePeriodSeconds"},
		{"spec", "template", "spec", "automountServiceAccountToken"},
		{"spec", "template", "spec", "volumes"},
	}
	svc := [][]string{{"spec", "type"}, {"spec", "ports"}}
	tests := []struct {
		name      string
		args      []string
		kustomize string
		fields    map[string][][]string // kind/name → the paths compared
		policy    string                // the ConfigMap holding config.yaml; "" is ConfigMap/gatekeeper-policy
	}{
		{
			name:      "defaults and the base",
			args:      []string{"--set", "metrics.serviceMonitor.enabled=true"},
			kustomize: "kubernetes",
			fields: map[string][][]string{
				"Deployment/gatekeeper":     gatekeeper,
				"Service/gatekeeper":        svc,
				"ServiceMonitor/gatekeeper": {{"spec", "endpoints"}},
			},
		},
		{
			name:      "our own Redis and components/redis",
			args:      []string{"--set", "redis.enabled=true", "--set", "replicas=2"},
			kustomize: "testdata/redis",
			fields: map[string][][]string{
				"Deployment/gatekeeper":          gatekeeper,
				"Service/gatekeeper":             svc,
				"Deployment/gatekeeper-redis":    {{"spec", "replicas"}, {"spec", "strategy"}, {"spec", "template", "spec"}},
				"Service/gatekeeper-redis":       svc,
				"PodDisruptionBudget/gatekeeper": {{"spec", "minAvailable"}},
			},
		},
		{
			name: "the endpoint picker and inference-gateway/base",
			args: []string{"--set", "fullnameOverride=gatekeeper-epp", "--set", "endpointPicker.enabled=true",
				"--set", "endpointPicker.inferencePool.name=vllm-llama3-8b", "--set", "endpointPicker.tls.secretName=gatekeeper-epp-tls"},
			kustomize: filepath.Join(inferenceGateway, "base"),
			fields: map[string][][]string{
				"Deployment/gatekeeper-epp": append(slices.Clone(gatekeeper), []string{"spec", "template", "spec", "serviceAccountName"}),
				"Service/gatekeeper-epp":    svc,
				"Role/gatekeeper-epp":       {{"rules"}},
			},
			policy: "ConfigMap/gatekeeper-epp-policy",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fromHelm := decodeObjects(t, helmTemplate(t, helm, tt.args...))
			built, err := runTool(t, 30*time.Second, nil, kustomize, "build", tt.kustomize)
			if err != nil {
				t.Fatalf("kustomize build %s: %v\n%s", tt.kustomize, err, built)
			}
			fromKustomize := decodeObjects(t, built)
			for key, paths := range tt.fields {
				h, k := fromHelm[key], fromKustomize[key]
				if h == nil || k == nil {
					t.Errorf("%s: rendered by helm %v, by kustomize %v; want both", key, h != nil, k != nil)
					continue
				}
				for _, p := range paths {
					for _, d := range valueDiff(strings.Join(p, "."), lookup(h, p...), lookup(k, p...)) {
						t.Errorf("%s %s (kustomize build %s)", key, d, tt.kustomize)
					}
				}
			}
			cm := cmp.Or(tt.policy, "ConfigMap/gatekeeper-policy")
			for _, d := range valueDiff("config.yaml", configYAML(t, fromHelm[cm]), configYAML(t, fromKustomize[cm])) {
				t.Errorf("%s %s (kustomize build %s)", cm, d, tt.kustomize)
			}
		})
	}
}

// TestHelmChartFiles: the chart reads the alert rules and the dashboard
// from copies inside it (.Files.Get cannot reach outside the chart); they
// must be the files deploy/ tests and ships.
func TestHelmChartFiles(t *testing.T) {
	t.Parallel()
	tests := []struct{ copy, original string }{
		{"files/gatekeeper-rules.yaml", "prometheus/gatekeeper-rules.yaml"},
		{"files/gatekeeper.json", "grafana/gatekeeper.json"},
	}
	for _, tt := range tests {
		got, err := os.ReadFile(filepath.Join(chart, tt.copy))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(tt.original)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("deploy/%s/%s differs from deploy/%s: cp deploy/%[3]s deploy/%[1]s/%[2]s", chart, tt.copy, tt.original)
		}
	}
}

// TestHelmChartVersion: the chart deploys the image the kustomize base
// does, by its appVersion.
func TestHelmChartVersion(t *testing.T) {
	t.Parallel()
	var c struct {
		APIVersion string `yaml:"apiVersion"`
		AppVersion string `yaml:"appVersion"`
	}
	readYAML(t, filepath.Join(chart, "Chart.yaml"), &c)
	var v struct {
		Image struct {
			Repository string `yaml:"repository"`
			Tag        string `yaml:"tag"`
		} `yaml:"image"`
	}
	readYAML(t, filepath.Join(chart, "values.yaml"), &v)
	var d deployment
	readYAML(t, "kubernetes/deployment.yaml", &d)
	image := v.Image.Repository + ":" + cmp.Or(v.Image.Tag, c.AppVersion)
	if c.APIVersion != "v2" || image != d.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("Chart.yaml apiVersion %q, default image %q; want v2 and the base's %q",
			c.APIVersion, image, d.Spec.Template.Spec.Containers[0].Image)
	}
}

// valueDiff returns where two decoded YAML values differ, one line per
// innermost difference: "path: the chart renders X, want Y".
func valueDiff(path string, got, want any) []string {
	if reflect.DeepEqual(got, want) {
		return nil
	}
	hm, hok := got.(map[string]any)
	km, kok := want.(map[string]any)
	if hok && kok {
		keys := slices.Collect(maps.Keys(hm))
		for k := range km {
			if _, ok := hm[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		var out []string
		for _, k := range keys {
			out = append(out, valueDiff(path+"."+k, hm[k], km[k])...)
		}
		return out
	}
	hl, hok := got.([]any)
	kl, kok := want.([]any)
	if hok && kok && len(hl) == len(kl) {
		var out []string
		for i := range hl {
			out = append(out, valueDiff(fmt.Sprintf("%s[%d]", path, i), hl[i], kl[i])...)
		}
		return out
	}
	return []string{fmt.Sprintf("%s: the chart renders %v, want %v", path, got, want)}
}

// helmTemplate renders the chart as release "gatekeeper" with extra flags.
func helmTemplate(t *testing.T, helm string, args ...string) string {
	t.Helper()
	args = append([]string{"template", "gatekeeper", chart, "--kube-version", chartKubeVersion}, args...)
	out, err := runTool(t, 60*time.Second, nil, helm, args...)
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
	return out
}

// decodeObjects decodes a stream of manifests into generic maps by
// kind/name, failing on a duplicate.
func decodeObjects(t *testing.T, stream string) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	dec := yaml.NewDecoder(strings.NewReader(stream))
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("manifests: %v\n%s", err, stream)
		}
		if obj == nil {
			continue // an empty document
		}
		key := lookup(obj, "kind").(string) + "/" + lookup(obj, "metadata", "name").(string)
		if objs[key] != nil {
			t.Fatalf("manifests: %s twice", key)
		}
		objs[key] = obj
	}
}

// lookup follows keys through nested maps; nil where one is missing.
func lookup(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// decodeInto re-decodes a generic object into one of the typed views.
func decodeInto(t *testing.T, obj map[string]any, v any) {
	t.Helper()
	if obj == nil {
		t.Fatalf("decode %T: no such object", v)
	}
	if err := yaml.Unmarshal([]byte(toYAML(t, obj)), v); err != nil {
		t.Fatal(err)
	}
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// policyText is the config.yaml of the rendered ConfigMap gatekeeper-policy.
func policyText(t *testing.T, objs map[string]map[string]any) string {
	t.Helper()
	text, ok := lookup(objs["ConfigMap/gatekeeper-policy"], "data", "config.yaml").(string)
	if !ok {
		t.Fatalf("no ConfigMap gatekeeper-policy with a config.yaml")
	}
	return text
}

// renderedPolicy parses the rendered policy, failing unless it is valid.
func renderedPolicy(t *testing.T, objs map[string]map[string]any) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(policyText(t, objs)))
	if err != nil {
		t.Fatalf("config.Parse(the rendered policy) = %v", err)
	}
	return cfg
}

// policyValues decodes the rendered policy as plain YAML values.
func policyValues(t *testing.T, objs map[string]map[string]any) map[string]any {
	t.Helper()
	return configYAML(t, objs["ConfigMap/gatekeeper-policy"])
}

// configYAML decodes a policy ConfigMap's config.yaml as plain YAML values.
func configYAML(t *testing.T, cm map[string]any) map[string]any {
	t.Helper()
	text, ok := lookup(cm, "data", "config.yaml").(string)
	if !ok {
		t.Fatalf("no ConfigMap with a config.yaml")
	}
	var v map[string]any
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		t.Fatalf("the rendered policy: %v", err)
	}
	return v
}
