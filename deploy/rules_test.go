package deploy

import (
	"testing"
	"time"
)

// TestAlertRules checks the alert rules with promtool and runs their unit
// tests (prometheus/gatekeeper-rules.test.yaml).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool := lookTool(t, "promtool", "scripts/install/prometheus.sh")
	tests := []struct {
		name string
		args []string
	}{
		{"check rules", []string{"check", "rules", "prometheus/gatekeeper-rules.yaml"}},
		{"test rules", []string{"test", "rules", "prometheus/gatekeeper-rules.test.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if out, err := runTool(t, 30*time.Second, nil, promtool, tt.args...); err != nil {
				t.Errorf("promtool %v: %v\n%s", tt.args, err, out)
			}
		})
	}
}
