package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestReplayPool: -pods and -routing run the multi-turn scenario on a pool
// under each routing and print the routing table, -autoscale the scaling
// table; bad values are refused.
func TestReplayPool(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"replay", "-scenario", "multi-turn", "-pods", "2", "-routing", "all", "-policies", "gatekeeper",
		"-hours", "0.02", "-conversation-rate", "1"}
	if err := run(t.Context(), args, &out, &errOut); err != nil {
		t.Fatalf("run(replay -pods 2) = %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"multi-turn, 2 pods", "| round-robin |", "| least-loaded |", "| prefix-only |",
		"| gatekeeper | gatekeeper |", "prefix hit rate", "the gatekeeper routing on 1 seeds: throughput at least"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("replay output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	args = []string{"replay", "-autoscale", "static,gatekeeper,kv-usage", "-policies", "gatekeeper", "-hours", "0.05",
		"-max-pods", "2", "-start-delay", "30s"}
	if err := run(t.Context(), args, &out, &errOut); err != nil {
		t.Fatalf("run(replay -autoscale) = %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"| static | 1 |", "| gatekeeper | 1 |", "| kv-usage | 1 |", "GPU-hours"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("replay -autoscale output lacks %q:\n%s", want, out.String())
		}
	}
	for _, bad := range [][]string{
		{"replay", "-autoscale", "magic"},
		{"replay", "-autoscale", "gatekeeper", "-policies", "unprotected", "-hours", "0.01"},
		{"replay", "-pods", "0"},
		{"replay", "-routing", "random"},
		{"replay", "-conversation-rate", "-1"},
		{"replay", "-conversation-rate", "2", "-hours", "0.01"}, // chat has no conversations
	} {
		if err := run(t.Context(), bad, &out, &errOut); err == nil {
			t.Errorf("run(%q) = nil, want an error", bad)
		}
	}
}
