package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

// TestReplayDecidesAsGatekeeper feeds the pressure rounds a replay saw to a
// controller built the way cmd/gatekeeper builds it (control.FromPolicy of
// the same file) and checks that it decides exactly what the replay decided,
// round by round: the replay's table is the product's.
func TestReplayDecidesAsGatekeeper(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"../../config.yaml", "testdata/high-util.yaml"} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.LoadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Upstreams[0].MaxInflight = 1024 // the H100 pod's max_num_seqs, as the operator sets it
			var rounds []replay.Round
			sc, err := replay.ScenarioByName("prompt-logprobs") // work the profile never ran kills the pod
			if err != nil {
				t.Fatal(err)
			}
			h100, _ := sim.GPUByName("H100-80G")
			s := replay.WithPolicy(cfg, sc.Apply(replay.Settings{Policy: replay.Gatekeeper,
				Engine: sim.Settings{GPU: h100, GPUMemoryUtilization: 0.95},
				Trace:  replay.TraceSettings{Duration: 10 * time.Minute, BaseQPS: 60, BurstQPS: 90, BurstEvery: 4 * time.Minute, BurstLength: time.Minute, Seed: 7}}))
			s.Observer = func(r replay.Round) { rounds = append(rounds, r) }
			s.TTFTDeadline = -1 // a backlog that outlives deadlines kills the pod: the failures are decided too
			if _, err := replay.Run(s); err != nil {
				t.Fatal(err)
			}
			ctl, err := control.New(control.FromPolicy(cfg))
			if err != nil {
				t.Fatal(err)
			}
			changes, failures := 0, 0
			for i, r := range rounds {
				for _, f := range r.Failures { // the error breaker opened between rounds
					ctl.PodFailedAt(f.At, "vllm-0", f.Inflight)
					failures++
				}
				got := ctl.ObserveAt(r.State.At, r.State, r.BacklogEmpty)
				if !reflect.DeepEqual(got, r.Decision) {
					t.Fatalf("round %d at %v: gatekeeper decides\n%+v\nthe replay decided\n%+v", i, r.State.At, got, r.Decision)
				}
				for _, c := range got.Upstreams {
					if c.LevelChanged || c.LimitChanged {
						changes++
					}
				}
			}
			if len(rounds) < 1000 || changes == 0 || failures == 0 {
				t.Fatalf("%d rounds, %d changes, %d failures: the trace must move the controller and kill the pod",
					len(rounds), changes, failures)
			}
		})
	}
}

// TestReplayJSON: -json prints one object per run with the fields a script
// reads.
func TestReplayJSON(t *testing.T) {
	t.Parallel()
	var out, errOut strings.Builder
	if err := runReplay([]string{"-hours", "0.02", "-policies", "unprotected,gatekeeper", "-json"}, &out, &errOut); err != nil {
		t.Fatalf("replay -json: %v (%s)", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("replay -json printed %d lines, want 2:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		for _, k := range []string{"horizon_hours", "policy", "gpu_memory_utilization", "oom_events",
			"goodput_tokens_per_s", "slo_goodput_tokens_per_s", "slo_attainment", "seed", "p99_short_s", "time_degraded_fraction",
			"time_critical_fraction", "refused_fraction"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("record lacks %s: %s", k, l)
			}
		}
	}
}
