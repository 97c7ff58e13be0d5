package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/syncbuf"
)

// TestGatekeeperMetrics runs one gatekeeper binary and checks its /metrics
// with the tools and files that consume it: promtool's linter, the names in
// the Grafana dashboard and the alert rules, and a real Prometheus server.
func TestGatekeeperMetrics(t *testing.T) {
	gk := startGatekeeper(t)
	scrape := gk.scrape(t)
	exported := families(t, scrape)

	t.Run("promtool check metrics", func(t *testing.T) {
		promtool := lookTool(t, "promtool", "scripts/install/prometheus.sh")
		out, err := runTool(t, 30*time.Second, scrape, promtool, "check", "metrics")
		if err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	})

	t.Run("dashboard and rules name exported metrics", func(t *testing.T) {
		eventOnly := eventOnlyMetrics(t)
		for name := range eventOnly {
			if exported[name] {
				t.Errorf("testdata/event-only-metrics.txt: %s is exported before any event; remove it from the list", name)
			}
		}
		tests := []struct {
			file  string
			exprs []string
		}{
			{"grafana/gatekeeper.json", dashboardExprs(t)},
			{"prometheus/gatekeeper-rules.yaml", ruleExprs(t)},
		}
		for _, tt := range tests {
			if len(tt.exprs) == 0 {
				t.Errorf("%s: no PromQL expressions found", tt.file)
			}
			for _, expr := range tt.exprs {
				for _, name := range promqlMetrics(expr) {
					if !exported[familyOf(name, exported)] && !eventOnly[name] {
						t.Errorf("%s: %s is not a metric gatekeeper exports (expr %q)", tt.file, name, expr)
					}
				}
			}
		}
	})

	t.Run("prometheus scrapes gatekeeper", func(t *testing.T) {
		prometheusScrapes(t, gk)
	})

	// Last: it changes the policy. As in deploy/kubernetes, the policy is a
	// ConfigMap volume; kubelet's update must reach gatekeeper's watcher.
	t.Run("ConfigMap update reloads the policy in place", func(t *testing.T) {
		const reloaded = `gatekeeper_config_reloads_total{result="success"} 1`
		if strings.Contains(string(scrape), reloaded) {
			t.Fatalf("/metrics has %s before any update", reloaded)
		}
		changed := strings.Replace(gk.policy, "log:\n", "fast_breaker:\n  qps: 81\nlog:\n", 1)
		gk.volume.update(t, map[string]string{"config.yaml": changed})
		waitFor(t, 20*time.Second, gk.exited, gk.log, "gatekeeper to reload the updated ConfigMap", func() bool {
			_, body := gk.get("http://" + gk.admin + "/metrics")
			return strings.Contains(body, reloaded)
		})
	})
}

// metricName finds the metric names in PromQL once quoted strings are gone.
var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	metricName = regexp.MustCompile(`\b(?:gatekeeper|vllm)_[a-zA-Z0-9_]*`)
)

// promqlMetrics returns the gatekeeper_ and vllm_ metric names in expr.
func promqlMetrics(expr string) []string {
	return metricName.FindAllString(quoted.ReplaceAllString(expr, `""`), -1)
}

// familyOf maps a histogram's series name (…_bucket, _sum, _count) to its
// family when the family is exported; other names map to themselves.
func familyOf(name string, exported map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && exported[base] {
			return base
		}
	}
	return name
}

// eventOnlyMetrics reads testdata/event-only-metrics.txt and checks that
// each name is declared in gatekeeper's Go sources.
func eventOnlyMetrics(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("testdata/event-only-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sources strings.Builder
	// Every package of the binary: a metric may move between them.
	for _, root := range []string{"../cmd/gatekeeper", "../internal"} {
		err := filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(file, ".go") || strings.HasSuffix(file, "_test.go") {
				return err
			}
			data, err := os.ReadFile(file)
			sources.Write(data)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if name := strings.TrimSpace(line); name != "" {
			if !strings.Contains(sources.String(), `"`+name+`"`) {
				t.Errorf("event-only-metrics.txt: %s is not declared in gatekeeper's sources", name)
			}
			names[name] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// ruleExprs returns the expressions of the alert rules.
func ruleExprs(t *testing.T) []string {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "prometheus/gatekeeper-rules.yaml", &rules)
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	return exprs
}

// prometheusScrapes starts a Prometheus server (loopback, its own storage
// and config, the alert rules loaded) that scrapes gk, and queries a
// gatekeeper series back through the HTTP API.
func prometheusScrapes(t *testing.T, gk *gatekeeper) {
	bin := lookTool(t, "prometheus", "scripts/install/prometheus.sh")
	dir := t.TempDir()
	rules, err := filepath.Abs("prometheus/gatekeeper-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: gatekeeper
    static_configs: [{targets: [%q]}]
`, rules, gk.admin), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := freeAddr(t)
	log := new(syncbuf.Buffer)
	exited := startProcess(t, log, bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	api := "http://" + listen + "/api/v1/"

	var got []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	query := `gatekeeper_pressure_level{job="gatekeeper",upstream="vllm-0"}`
	waitFor(t, 30*time.Second, exited, log, "Prometheus to return "+query, func() bool {
		return apiGet(gk, api+"query?query="+url.QueryEscape(query), &got) && len(got) > 0
	})
	if len(got) != 1 || got[0].Value[1] != "0" || got[0].Metric["instance"] != gk.admin {
		t.Errorf("query %s = %+v, want one series of value 0 from instance %s", query, got, gk.admin)
	}

	var loaded struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name string `json:"name"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if !apiGet(gk, api+"rules", &loaded) || len(loaded.Groups) != 1 || len(loaded.Groups[0].Rules) != len(ruleExprs(t)) {
		t.Errorf("rules loaded = %+v, want the group of prometheus/gatekeeper-rules.yaml", loaded)
	}
}

// apiGet decodes a Prometheus API answer's data into v; false unless the
// call succeeded.
func apiGet(gk *gatekeeper, u string, v any) bool {
	code, body := gk.get(u)
	if code != 200 {
		return false
	}
	var resp struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if json.Unmarshal([]byte(body), &resp) != nil || resp.Status != "success" {
		return false
	}
	var result struct {
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(resp.Data, &result) == nil && result.Result != nil {
		return json.Unmarshal(result.Result, v) == nil
	}
	return json.Unmarshal(resp.Data, v) == nil
}
