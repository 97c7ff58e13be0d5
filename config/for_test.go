package config

import (
	"strings"
	"testing"
	"time"
)

// TestRuleFor: a rule's for parses as a duration and is checked with the
// key and line (cmd/vllm-sim's TestApplyPolicyMapsEveryKey follows it into
// the breaker's rule).
func TestRuleFor(t *testing.T) {
	t.Parallel()
	const up = "upstreams: [{url: 'http://a:1'}]\npressure:\n  rules:\n"
	c, err := Parse([]byte(up + "    fragmentation: {degrade: 1.2, shed: 1.5, for: 1500ms}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Pressure.Rules[SignalFragmentation].For; f != 1500*time.Millisecond {
		t.Fatalf("for = %v, want 1.5s", f)
	}
	for _, tc := range []struct{ rule, want string }{
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
