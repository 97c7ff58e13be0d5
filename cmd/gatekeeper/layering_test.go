package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestLayering fences every package's imports in one table: the one-way
// import rules of DESIGN §9 and STYLE §1. It reads `go list` (direct imports
// for the bans, transitive dependencies for the gatekeeper packages).
func TestLayering(t *testing.T) {
	t.Parallel()
	const mod = "github.com/gatekeeper-dev/gatekeeper/"
	tests := []struct {
		pkg string
		// gatekeeper packages it may depend on (transitively); "p/..."
		// stands for every package under p
		own []string
		// third-party modules it may import directly; nil: any
		thirdParty []string
		// standard-library imports it must not use directly
		banned []string
	}{
		{pkg: "internal/config", own: []string{}, thirdParty: []string{"go.yaml.in/yaml/v3", "github.com/fsnotify/fsnotify"}},
		{pkg: "internal/breaker", own: []string{}, thirdParty: []string{"golang.org/x/time/rate", "github.com/sony/gobreaker/v2"},
			banned: []string{"net/http", "log", "log/slog"}},
		// Pod scoring (the queue's Scorer): pure, no I/O, no logging.
		{pkg: "internal/route", own: []string{}, thirdParty: []string{"github.com/cespare/xxhash/v2", "github.com/hashicorp/golang-lru/v2/simplelru"},
			banned: []string{"net", "net/http", "log", "log/slog"}},
		{pkg: "internal/queue", own: []string{}, thirdParty: []string{}, banned: []string{"net", "net/http", "log", "log/slog"}},
		{pkg: "internal/pressure", own: []string{}, thirdParty: []string{"github.com/NVIDIA/go-nvml/pkg/nvml",
			"github.com/prometheus/common/expfmt", "github.com/prometheus/common/model", "github.com/prometheus/client_model/go"}},
		// gatekeeper probe: one source read once with pressure's parsers.
		{pkg: "internal/pressure/probe", own: []string{"internal/pressure"}, thirdParty: []string{"github.com/NVIDIA/go-nvml/pkg/nvml"},
			banned: []string{"log", "log/slog"}},
		// The slow path's one controller: it reads pressure, decides with
		// breaker's machines, names the queue's order and maps the policy
		// file; no HTTP, no logging (cmd turns its decisions into both).
		{pkg: "internal/control", own: []string{"internal/breaker", "internal/config", "internal/pressure", "internal/queue"}, thirdParty: []string{},
			banned: []string{"net/http", "log", "log/slog"}},
		// DNS discovery: expands the policy's discovered upstreams; pure but for
		// the lookup it is handed, no HTTP, no logging.
		{pkg: "internal/discovery", own: []string{"internal/config"}, thirdParty: []string{}, banned: []string{"net/http", "log", "log/slog"}},
		// Token quotas per client key, class and model (per minute, per
		// day): pure counting, no I/O, no logging.
		{pkg: "internal/quota", own: []string{}, thirdParty: []string{}, banned: []string{"net", "net/http", "log", "log/slog"}},
		// Sharing limits and windows between replicas through Redis (issue
		// 13): its Gate falls back to breaker's buckets, its Quotas to
		// quota's, at this replica's share; no HTTP, no logging.
		{pkg: "internal/cluster", own: []string{"internal/breaker", "internal/quota"}, thirdParty: []string{"github.com/redis/go-redis/v9",
			"github.com/redis/go-redis/v9/maintnotifications"}, banned: []string{"net/http", "log", "log/slog"}},
		// The cluster inside a gatekeeper: its Cluster and Gate, and what a
		// switch of mode reports (log, gauges); no HTTP.
		{pkg: "internal/cluster/sharing", own: []string{"internal/cluster", "internal/breaker", "internal/quota"},
			thirdParty: []string{"github.com/prometheus/client_golang/prometheus"}, banned: []string{"net/http"}},
		// A real redis-server for the tests of cluster and of the replicas.
		{pkg: "internal/cluster/clustertest", own: []string{}, thirdParty: []string{}, banned: []string{"net/http", "log/slog"}},
		// The tests' buffer for a child's or a logger's output: nothing else.
		{pkg: "internal/syncbuf", own: []string{}, thirdParty: []string{}, banned: []string{"net", "net/http", "log/slog"}},
		// The admin listener's documents (/admin/state, the scrape-time
		// collectors, the status page): it reads the packages it reports on
		// through funcs it is handed; no logging, never sim.
		{pkg: "internal/admin", own: []string{"internal/config", "internal/control", "internal/breaker", "internal/queue", "internal/pressure", "internal/pods", "internal/proxy", "internal/proxy/...",
			"internal/route"},
			thirdParty: []string{"github.com/prometheus/client_golang/prometheus"}, banned: []string{"log", "log/slog"}},
		// The pod registry of the decision core: pods, health, their error
		// breakers, models, availability (published for the queue); no I/O,
		// no logging. Its health checker is its only HTTP.
		{pkg: "internal/pods", own: []string{"internal/breaker", "internal/queue"}, thirdParty: []string{}, banned: []string{"net/http", "log", "log/slog"}},
		{pkg: "internal/pods/healthcheck", own: []string{"internal/pods", "internal/breaker", "internal/queue"}, thirdParty: []string{}},
		// The decision core both fronts ask: classification, model routing,
		// classes, deadlines, the fast and slow breaker, the queue and the
		// pod's error breaker, and the one mapping of every refusal. No HTTP,
		// no logging, no front.
		{pkg: "internal/decide", own: []string{"internal/pods", "internal/breaker", "internal/queue", "internal/quota", "internal/classify", "internal/route"}, thirdParty: []string{},
			banned: []string{"net", "net/http", "log", "log/slog"}},
		// The endpoint-picker front of the core: Envoy's ext_proc over gRPC,
		// traced as the proxy is (OpenTelemetry's API; the trace context in
		// the stream's gRPC metadata).
		{pkg: "internal/epp", own: []string{"internal/decide", "internal/pods", "internal/breaker", "internal/queue", "internal/quota", "internal/classify", "internal/usage", "internal/telemetry/coretrace", "internal/route"},
			thirdParty: []string{"google.golang.org/grpc", "google.golang.org/grpc/codes", "google.golang.org/grpc/keepalive", "google.golang.org/grpc/status",
				"google.golang.org/grpc/health/grpc_health_v1", "google.golang.org/grpc/metadata", "google.golang.org/protobuf/types/known/structpb",
				"go.opentelemetry.io/otel/codes", "go.opentelemetry.io/otel/propagation", "go.opentelemetry.io/otel/semconv/v1.41.0",
				"go.opentelemetry.io/otel/trace",
				"github.com/envoyproxy/go-control-plane/envoy/config/core/v3",
				"github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3",
				"github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3",
				"github.com/envoyproxy/go-control-plane/envoy/type/v3"}},
		// The InferencePool watch: the only package that imports client-go.
		{pkg: "internal/discovery/inferencepool", own: []string{}, thirdParty: nil},
		// The policy's life (issue 36): load, discovery expansion, every
		// package's Settings, Prepare and an Apply that cannot fail. It
		// changes the packages it is handed; it builds no front and reads
		// no sim. It reads the Kubernetes API only through inferencepool.
		{pkg: "internal/policy", own: []string{"internal/breaker", "internal/classify", "internal/cluster", "internal/config", "internal/control",
			"internal/decide", "internal/discovery", "internal/discovery/...", "internal/pods", "internal/pods/...", "internal/pressure",
			"internal/proxy", "internal/proxy/...", "internal/queue", "internal/quota", "internal/route", "internal/scale", "internal/telemetry", "internal/telemetry/...", "internal/usage"},
			thirdParty: []string{"github.com/prometheus/client_golang/prometheus"}},
		// The controller's rounds applied (issue 36): windows through
		// cluster.Windows, level changes to the log, metrics and relief
		// hooks; no HTTP of its own (relief calls the hooks).
		{pkg: "internal/slowpath", own: []string{"internal/breaker", "internal/cluster", "internal/config", "internal/control", "internal/pressure",
			"internal/queue", "internal/quota", "internal/relief", "internal/route"}, thirdParty: []string{"github.com/prometheus/client_golang/prometheus"},
			banned: []string{"net/http"}},
		// The scaling signal (issue 37): a pool's forecast and desired
		// replicas, pure but for the gauges it registers and the registry it
		// gathers; no HTTP (admin serves /admin/scale), no logging.
		{pkg: "internal/scale", own: []string{}, thirdParty: []string{"github.com/prometheus/client_golang/prometheus", "github.com/prometheus/client_model/go"},
			banned: []string{"net", "net/http", "log", "log/slog"}},
		// The traffic listener's bounds: its connection cap, the open-file
		// limit it needs, the gauge of open connections.
		{pkg: "internal/listener", own: []string{}, thirdParty: []string{"github.com/prometheus/client_golang/prometheus", "golang.org/x/net/netutil"},
			banned: []string{"log", "log/slog"}},
		// Gatekeeper's guard against its own saturation: the scheduler's
		// delay from runtime/metrics, no I/O, no logging.
		{pkg: "internal/overload", own: []string{}, thirdParty: []string{},
			banned: []string{"net", "net/http", "log", "log/slog"}},
		// The HTTP front of the core.
		{pkg: "internal/proxy", own: []string{"internal/decide", "internal/pods", "internal/breaker", "internal/queue", "internal/quota", "internal/classify", "internal/proxy/framing", "internal/usage",
			"internal/telemetry/coretrace", "internal/route", "internal/proxy/podconn"},
			thirdParty: []string{"github.com/prometheus/client_golang/prometheus", "golang.org/x/net/http/httpguts",
				"go.opentelemetry.io/otel/attribute", "go.opentelemetry.io/otel/codes", "go.opentelemetry.io/otel/propagation",
				"go.opentelemetry.io/otel/semconv/v1.41.0", "go.opentelemetry.io/otel/trace"}},
		// OpenTelemetry's trace pipeline (issue 27): the SDK and its OTLP
		// exporters; no other gatekeeper package, no logging, no global
		// provider (the fronts are handed it).
		{pkg: "internal/telemetry", own: []string{}, thirdParty: []string{"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc",
			"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp", "go.opentelemetry.io/otel/propagation",
			"go.opentelemetry.io/otel/sdk/resource", "go.opentelemetry.io/otel/sdk/trace", "go.opentelemetry.io/otel/semconv/v1.41.0"},
			banned: []string{"log", "log/slog"}},
		// What both fronts put on their spans about the core's decisions (the
		// admission span, the gatekeeper.* and GenAI attributes, the server
		// span's parent): decide's types and OpenTelemetry's API, not its SDK
		// (telemetry's), no HTTP, no logging.
		{pkg: "internal/telemetry/coretrace", own: []string{"internal/decide", "internal/pods", "internal/breaker", "internal/queue", "internal/quota", "internal/classify", "internal/route"},
			thirdParty: []string{"go.opentelemetry.io/otel/attribute", "go.opentelemetry.io/otel/codes",
				"go.opentelemetry.io/otel/semconv/v1.41.0", "go.opentelemetry.io/otel/trace"},
			banned: []string{"net", "net/http", "log", "log/slog"}},
		// proxy's parts that need no handler: pure, no logging, none of the
		// traffic-control packages (nor proxy itself).
		{pkg: "internal/classify", own: []string{}, thirdParty: []string{}, banned: []string{"net", "net/http", "log", "log/slog"}},
		{pkg: "internal/proxy/framing", own: []string{}, thirdParty: []string{}, banned: []string{"net/http", "log", "log/slog"}},
		// The transport to the pods: net/http's serializer and parser on the
		// caller's goroutine; no gatekeeper package, no logging.
		{pkg: "internal/proxy/podconn", own: []string{}, thirdParty: []string{"golang.org/x/net/http/httpguts"}, banned: []string{"log", "log/slog"}},
		{pkg: "internal/usage", own: []string{"internal/classify"}, thirdParty: []string{}, banned: []string{"log", "log/slog"}},
		{pkg: "internal/relief", own: []string{}, thirdParty: []string{}, banned: []string{"log", "log/slog"}},
		// The traffic listener's certificate, re-read when rotated: crypto/tls
		// and the files; it logs a rotation (a logger it is handed), no HTTP.
		{pkg: "internal/proxy/tlscert", own: []string{}, thirdParty: []string{}, banned: []string{"net", "net/http"}},
		{pkg: "sim", own: []string{}, thirdParty: []string{}, banned: []string{"net", "net/http", "log", "log/slog"}},
		// The replay runs the product's control code on a virtual clock: the
		// controller (control), what it drives (breaker, queue) and reads
		// (pressure), the policy it is built from (config) and the request
		// estimate's constants (proxy/classify), the pod scorers (route) and
		// the scaling estimator (scale) of a pool of pods.
		{pkg: "sim/replay", own: []string{"sim", "sim/...", "internal/control", "internal/breaker", "internal/queue", "internal/pressure", "internal/config", "internal/classify", "internal/route", "internal/scale"}, thirdParty: []string{},
			banned: []string{"net/http"}},
		{pkg: "sim/server", own: []string{"sim"}, thirdParty: []string{}},
		// The capacity advisor runs the replay's grid: it may import what the
		// replay may.
		{pkg: "sim/advise", own: []string{"sim", "sim/...", "internal/control", "internal/breaker", "internal/queue", "internal/pressure", "internal/config", "internal/classify", "internal/route", "internal/scale"}, thirdParty: []string{},
			banned: []string{"net/http"}},
		// What the four traffic generators share (sim/traffic) is pure; the
		// demo's load generator (sim/load) adds only HTTP and logging.
		{pkg: "sim/traffic", own: []string{}, thirdParty: []string{}, banned: []string{"net", "net/http", "log", "log/slog"}},
		{pkg: "sim/load", own: []string{"sim/traffic"}, thirdParty: []string{}},
		// The -demo's pod preset, policy and text: it builds the pod with
		// sim/server and reads pressure.State, but serves nothing itself.
		{pkg: "sim/demo", own: []string{"sim", "sim/server", "internal/pressure"}, thirdParty: []string{}, banned: []string{"net", "net/http"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			t.Parallel()
			deps := goList(t, "{{join .Deps \"\\n\"}}", mod+tt.pkg)
			for _, d := range deps {
				own, ok := strings.CutPrefix(d, mod)
				if !ok {
					continue
				}
				if !allowed(tt.own, own) {
					t.Errorf("%s depends on %s", tt.pkg, own)
				}
			}
			for _, imp := range goList(t, "{{join .Imports \"\\n\"}}", mod+tt.pkg) {
				first, _, _ := strings.Cut(imp, "/")
				thirdParty := strings.Contains(first, ".") && !strings.HasPrefix(imp, mod)
				if thirdParty && tt.thirdParty != nil && !contains(tt.thirdParty, imp) {
					t.Errorf("%s imports %s, not one of its chosen dependencies", tt.pkg, imp)
				}
				if contains(tt.banned, imp) {
					t.Errorf("%s imports %s, which it must not use", tt.pkg, imp)
				}
			}
		})
	}
	// Only the InferencePool watch (and the command that wires it) reads
	// the Kubernetes API.
	for _, line := range goList(t, "{{.ImportPath}} {{join .Imports \" \"}}", mod+"...") {
		pkg, imports, _ := strings.Cut(line, " ")
		if pkg == mod+"internal/discovery/inferencepool" || pkg == mod+"cmd/gatekeeper" {
			continue
		}
		if strings.Contains(" "+imports, " k8s.io/") {
			t.Errorf("%s imports k8s.io/...; only internal/discovery/inferencepool may", pkg)
		}
	}
	// No build carries the typed Kubernetes API (k8s.io/api, the typed
	// clientset): minutes of cold compilation for types the dynamic client
	// does without.
	for _, line := range goList(t, "{{.ImportPath}} {{join .Deps \" \"}}", mod+"...") {
		pkg, deps, _ := strings.Cut(line, " ")
		for _, banned := range []string{"k8s.io/api/", "k8s.io/client-go/kubernetes", "k8s.io/client-go/informers"} {
			if strings.Contains(" "+deps, " "+banned) {
				t.Errorf("%s depends on %s...; read the Kubernetes API through client-go's dynamic client", pkg, banned)
			}
		}
	}
	// The fronts translate the core: decide depends on neither front, and
	// neither front on the other (issue 36).
	for _, fence := range []struct{ pkg, banned string }{
		{"internal/decide", "internal/proxy"}, {"internal/decide", "internal/epp"}, {"internal/epp", "internal/proxy"},
		{"internal/proxy", "internal/epp"},
	} {
		for _, d := range goList(t, "{{join .Deps \"\\n\"}}", mod+fence.pkg) {
			if own, ok := strings.CutPrefix(d, mod); ok && (own == fence.banned || strings.HasPrefix(own, fence.banned+"/")) {
				t.Errorf("%s depends on %s: a front is a translation of the core, never its dependency", fence.pkg, own)
			}
		}
	}
	// Nothing imports sim but the commands and sim's own subpackages.
	for _, line := range goList(t, "{{.ImportPath}} {{join .Deps \" \"}}", mod+"...") {
		pkg, deps, _ := strings.Cut(line, " ")
		if strings.HasPrefix(pkg, mod+"cmd/") || pkg == mod+"sim" || strings.HasPrefix(pkg, mod+"sim/") {
			continue
		}
		if strings.Contains(" "+deps+" ", " "+mod+"sim ") {
			t.Errorf("%s depends on sim; only cmd/* and sim's subpackages may", pkg)
		}
	}
}

// TestDesignNamesEveryPackage: docs/design.md's "Packages and seams" is
// the architecture page (CONTRIBUTING.md sends contributors there), so its
// package list names every package of the module.
func TestDesignNamesEveryPackage(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Packages and seams\n")
	if !ok {
		t.Fatal("docs/design.md has no section Packages and seams")
	}
	block := regexp.MustCompile("(?s)```\n(.*?)```").FindStringSubmatch(section)
	if block == nil {
		t.Fatal("docs/design.md's Packages and seams has no package list")
	}
	const mod = "github.com/gatekeeper-dev/gatekeeper/"
	for _, pkg := range goList(t, "{{.ImportPath}}", mod+"...") {
		path := strings.TrimPrefix(pkg, mod)
		if !regexp.MustCompile(`(?m)(^|[\s(])` + regexp.QuoteMeta(path) + `([\s:;,)]|$)`).MatchString(block[1]) {
			t.Errorf("docs/design.md's package list does not name %s", path)
		}
	}
}

func goList(t *testing.T, format, pkg string) []string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command: %v", err)
	}
	out, err := exec.Command("go", "list", "-f", format, pkg).Output()
	if err != nil { // a package the table names that is gone fails, never skips
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.FieldsFunc(string(out), func(r rune) bool { return r == '\n' })
}

// allowed reports whether pkg is in list, or under an entry "p/..." of it.
func allowed(list []string, pkg string) bool {
	for _, x := range list {
		if p, ok := strings.CutSuffix(x, "/..."); ok && strings.HasPrefix(pkg, p+"/") || x == pkg {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
