// Package deploy holds what runs gatekeeper outside this repository — the
// Kubernetes manifests (kubernetes/, and inference-gateway/ for gatekeeper
// as an InferencePool's endpoint picker), the Helm chart (helm/), the
// Prometheus alert rules (prometheus/) and the Grafana dashboard
// (grafana/) — and the tests that check them against the real tools:
// kubeconform with the vendored strict schemas (schemas/), kustomize, helm,
// Envoy's bootstrap API (go-control-plane and its validation rules),
// promtool, a Prometheus server scraping a gatekeeper built from this
// module, and the metric names the binary exports. It has no code of its
// own.
//
// A test whose tool is absent skips and names the install script under
// scripts/install; with GATEKEEPER_REQUIRE_TOOLS=1 in the environment (CI)
// it fails instead.
package deploy
