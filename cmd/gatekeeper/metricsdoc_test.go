package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// docs/metrics.md is generated from the metrics the app registers (a
// cluster policy, so those are included too); TestMetricsReference fails
// when it drifts, and -update-metrics rewrites it:
//
//	go test ./cmd/gatekeeper -run TestMetricsReference -update-metrics
var updateMetrics = flag.Bool("update-metrics", false, "rewrite docs/metrics.md")

const metricsPath = "../../docs/metrics.md"

// metricsPolicy turns on every optional part that registers metrics.
const metricsPolicy = `
upstreams: [{name: pod, url: "http://127.0.0.1:1"}]
classes: {default: a, list: [{name: a}]}
cluster: {redis: {url: "redis://127.0.0.1:1/0"}}
scaling: {}
`

// metricDoc is one metric of the reference.
type metricDoc struct {
	name, kind, labels, unit, help string
}

var descRE = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", help: "((?:[^"\\]|\\.)*)",(?: unit: "[^"]*",)? constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// describe lists the metrics c describes, typed by what c collects or,
// for a vector without children yet, by c's own type.
func describe(t *testing.T, c prometheus.Collector) []metricDoc {
	t.Helper()
	descs := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(descs); close(descs) }()
	var out []metricDoc
	for d := range descs {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		labels := strings.Split(m[4], ",")
		if m[4] == "" {
			labels = nil
		}
		for _, cl := range strings.Split(m[3], ",") {
			if k, _, ok := strings.Cut(cl, "="); ok {
				labels = append(labels, k)
			}
		}
		for i := range labels {
			labels[i] = "`" + strings.TrimSpace(labels[i]) + "`"
		}
		out = append(out, metricDoc{name: m[1], help: strings.ReplaceAll(m[2], `\"`, `"`),
			labels: strings.Join(labels, ", "), kind: kindOf(c), unit: unitOf(m[1])})
	}
	if slices.ContainsFunc(out, func(d metricDoc) bool { return d.kind == "" }) {
		kinds := collectedKinds(c)
		for i := range out {
			switch {
			case out[i].kind != "":
			case kinds[out[i].name] != "":
				out[i].kind = kinds[out[i].name]
			case strings.HasSuffix(out[i].name, "_total"): // nothing collected yet: by the naming rules
				out[i].kind = "counter"
			default:
				out[i].kind = "gauge"
			}
		}
	}
	return out
}

// kindOf is c's metric type when c is one of client_golang's own.
func kindOf(c prometheus.Collector) string {
	switch c.(type) { // Gauge before Counter: a Gauge has Counter's methods too
	case prometheus.Histogram, *prometheus.HistogramVec:
		return "histogram"
	case prometheus.Gauge, *prometheus.GaugeVec:
		return "gauge"
	case prometheus.Counter, *prometheus.CounterVec:
		return "counter"
	}
	return ""
}

// collectedKinds collects c once and types each metric it sends.
func collectedKinds(c prometheus.Collector) map[string]string {
	ms := make(chan prometheus.Metric, 256)
	go func() { c.Collect(ms); close(ms) }()
	out := map[string]string{}
	for m := range ms {
		var pb dto.Metric
		if m.Write(&pb) != nil {
			continue
		}
		name := descRE.FindStringSubmatch(m.Desc().String())
		if name == nil {
			continue
		}
		switch {
		case pb.Counter != nil:
			out[name[1]] = "counter"
		case pb.Histogram != nil:
			out[name[1]] = "histogram"
		default:
			out[name[1]] = "gauge"
		}
	}
	return out
}

// unitOf reads the unit from the name, by Prometheus' naming rules.
func unitOf(name string) string {
	n := strings.TrimSuffix(name, "_total")
	if strings.HasSuffix(n, "_per_second") {
		return "per second"
	}
	for _, u := range []string{"seconds", "bytes", "ratio", "tokens"} {
		if strings.HasSuffix(n, "_"+u) {
			return u
		}
	}
	if strings.HasSuffix(name, "_timestamp_seconds") {
		return "seconds (Unix time)"
	}
	return ""
}

func generateMetricsDoc(t *testing.T) []byte {
	t.Helper()
	a, err := newApp(mustParse(t, metricsPolicy), appOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.shared.Cluster().Close() })
	var docs []metricDoc
	for _, c := range a.reg.registered() {
		if name := fmt.Sprintf("%T", c); strings.Contains(name, "goCollector") || strings.Contains(name, "processCollector") {
			continue
		}
		docs = append(docs, describe(t, c)...)
	}
	slices.SortFunc(docs, func(a, b metricDoc) int { return strings.Compare(a.name, b.name) })
	var b bytes.Buffer
	b.WriteString(`# Metrics

Every metric gatekeeper exports on the admin listener's ` + "`/metrics`" + `, generated
from what the app registers (with traffic classes and a ` + "`cluster`" + ` section on,
so theirs are included) by
` + "`go test ./cmd/gatekeeper -run TestMetricsReference -update-metrics`" + `; a test
fails when this page drifts from the code. Besides these: the Go runtime
(` + "`go_*`" + `) and process (` + "`process_*`" + `) collectors. docs/operations.md says what
to watch and the alerts built on them.

| Metric | Type | Labels | Unit | Meaning |
|---|---|---|---|---|
`)
	for _, d := range docs {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", d.name, d.kind, d.labels, d.unit, strings.ReplaceAll(d.help, "|", `\|`))
	}
	return b.Bytes()
}

// TestMetricsReference: docs/metrics.md lists exactly the metrics the app
// registers, with their help texts.
func TestMetricsReference(t *testing.T) {
	got := generateMetricsDoc(t)
	if *updateMetrics {
		if err := os.WriteFile(metricsPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(metricsPath)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s differs from the registered metrics (err %v); run: go test ./cmd/gatekeeper -run TestMetricsReference -update-metrics", metricsPath, err)
	}
}
