package deploy

import (
	"reflect"
	"strings"
	"testing"
)

// checkAutoscaling checks what a schema cannot of a rendered ScaledObject
// or HPA: it scales the vLLM Deployment on gatekeeper_desired_replicas of
// pool with an AverageValue target of 1, so the Deployment runs the desired
// count.
func checkAutoscaling(t *testing.T, objs map[string]map[string]any, pool string) {
	t.Helper()
	for key, obj := range objs {
		kind, _, _ := strings.Cut(key, "/")
		var metric, target any
		switch kind {
		case "ScaledObject":
			trig, _ := lookup(obj, "spec", "triggers").([]any)
			if len(trig) != 1 {
				t.Fatalf("%s: triggers %v, want one", key, trig)
			}
			metric, target = lookup(trig[0], "metadata", "query"), lookup(trig[0], "metadata", "threshold")
			if want := `max(gatekeeper_desired_replicas{pool="` + pool + `"})`; metric != want {
				t.Errorf("%s: query %v, want %s", key, metric, want)
			}
			if lookup(trig[0], "type") != "prometheus" || lookup(trig[0], "metricType") != "AverageValue" {
				t.Errorf("%s: trigger %v, want prometheus with metricType AverageValue", key, trig[0])
			}
		case "HorizontalPodAutoscaler":
			ms, _ := lookup(obj, "spec", "metrics").([]any)
			if len(ms) != 1 {
				t.Fatalf("%s: metrics %v, want one", key, ms)
			}
			metric, target = lookup(ms[0], "external", "metric", "name"), lookup(ms[0], "external", "target", "averageValue")
			if sel := lookup(ms[0], "external", "metric", "selector", "matchLabels"); !reflect.DeepEqual(sel, map[string]any{"pool": pool}) {
				t.Errorf("%s: metric selector %v, want pool=%s", key, sel, pool)
			}
		default:
			continue
		}
		if m, _ := metric.(string); !strings.Contains(m, "gatekeeper_desired_replicas") || target != "1" {
			t.Errorf("%s: metric %v with target %v, want gatekeeper_desired_replicas with 1", key, metric, target)
		}
		if lookup(obj, "spec", "scaleTargetRef", "kind") != "Deployment" || lookup(obj, "spec", "scaleTargetRef", "name") == "gatekeeper" {
			t.Errorf("%s: scales %v, want the vLLM Deployment, not gatekeeper's", key, lookup(obj, "spec", "scaleTargetRef"))
		}
	}
}
