package config

import (
	"strings"
	"testing"
	"time"
)

// TestRuleDurations: a rule's horizon (trend rule) and for (a level held
// before it is entered) parse as durations and are checked with the key and
// line (cmd/vllm-sim's TestApplyPolicyMapsEveryKey follows them into the
// breaker's rule).
func TestRuleDurations(t *testing.T) {
	t.Parallel()
	const up = "upstreams: [{url: 'http://a:1'}]\npressure:\n  rules:\n"
	c, err := Parse([]byte(up + "    fragmentation: {degrade: 1.2, shed: 1.5, horizon: 2s, for: 1500ms}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Pressure.Rules[signalFragmentation]; r.Horizon != 2*time.Second || r.For != 1500*time.Millisecond {
		t.Fatalf("horizon %v, for %v; want 2s and 1.5s", r.Horizon, r.For)
	}
	for _, tc := range []struct{ rule, want string }{
		{"fragmentation: {degrade: 1.2, horizon: -1s}", "line 4: pressure.rules.fragmentation.horizon: must be between 0 and 1m"},
		{"fragmentation: {degrade: 1.2, horizon: 2m}", "line 4: pressure.rules.fragmentation.horizon: must be between 0 and 1m"},
		{"waiting: {horizon: 2s}", "line 4: pressure.rules.waiting.horizon: needs a degrade or shed threshold"},
		{"fragmentation: {degrade: 1.2, for: -1s}", "line 4: pressure.rules.fragmentation.for: must be between 0 and 1m"},
		{"fragmentation: {degrade: 1.2, for: 2m}", "line 4: pressure.rules.fragmentation.for: must be between 0 and 1m"},
		{"waiting: {for: 2s}", "line 4: pressure.rules.waiting.for: needs a degrade or shed threshold"},
	} {
		_, err := Parse([]byte(up + "    " + tc.rule + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", tc.rule, err, tc.want)
		}
	}
}
