package config

import (
	"strings"
	"testing"
	"time"
)

// TestRuleHorizon: a trend rule's horizon parses as a duration and is
// checked with the key and line.
func TestRuleHorizon(t *testing.T) {
	t.Parallel()
	const up = "upstreams: [{url: 'http://a:1'}]\npressure:\n  rules:\n"
	c, err := Parse([]byte(up + "    fragmentation: {degrade: 1.2, shed: 1.5, horizon: 2s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h := c.Pressure.Rules[SignalFragmentation].Horizon; h != 2*time.Second {
		t.Fatalf("horizon = %v, want 2s", h)
	}
	for _, tc := range []struct{ rule, want string }{
		{"fragmentation: {degrade: 1.2, horizon: -1s}", "line 4: pressure.rules.fragmentation.horizon: must be between 0 and 1m"},
		{"fragmentation: {degrade: 1.2, horizon: 2m}", "line 4: pressure.rules.fragmentation.horizon: must be between 0 and 1m"},
		{"waiting: {horizon: 2s}", "line 4: pressure.rules.waiting.horizon: needs a degrade or shed threshold"},
	} {
		_, err := Parse([]byte(up + "    " + tc.rule + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", tc.rule, err, tc.want)
		}
	}
}
