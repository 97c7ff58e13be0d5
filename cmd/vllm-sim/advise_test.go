package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestAdviseHelp(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"advise", "-h"}, &out, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run(advise -h) = %v, want flag.ErrHelp", err)
	}
	for _, name := range []string{"-model", "-params", "-layers", "-kv-heads", "-head-dim", "-vocab", "-gpus",
		"-gpu-memory-utilization", "-max-num-seqs", "-steady-qps", "-burst-qps", "-prompt", "-output", "-hours",
		"-seed", "-slo-target", "-max-ooms", "-max-pods", "-parallel", "-json", "docs/simulation.md"} {
		if !strings.Contains(out.String(), name) {
			t.Fatalf("advise -h lacks %s:\n%s", name, out.String())
		}
	}
}

func TestAdviseFlags(t *testing.T) {
	o, err := parseAdviseFlags([]string{"-model", "llama-2-13b", "-layers", "20", "-kv-heads", "8", "-gpus", "A100-40G,H200",
		"-gpu-memory-utilization", "0.8,0.85", "-max-num-seqs", "64,0", "-prompt", "2000-4000", "-output", "10-20", "-hours", "0.5"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	s := o.s
	if s.Model.Layers != 20 || s.Model.KVHeads != 8 || s.Model.Vocab != 32000 || !strings.HasPrefix(s.Model.Name, "custom") ||
		len(s.GPUs) != 2 || s.GPUs[1].Name != "H200" || len(s.Utilizations) != 2 || s.MaxNumSeqs[0] != 64 ||
		s.Horizon != 30*time.Minute || len(s.Traffic.Classes) != 1 || s.Traffic.Classes[0].Name != "long" ||
		s.Traffic.Classes[0].MaxTokens != 20 || s.Traffic.SteadyQPS != 50 || s.Traffic.BurstQPS != 80 || s.SLOTarget != 0.99 {
		t.Fatalf("settings = %+v", s)
	}
	for _, args := range [][]string{
		{"-gpus", "V100"},
		{"-gpus", ""},
		{"-model", "gpt-5"},
		{"-gpu-memory-utilization", "1.5"},
		{"-gpu-memory-utilization", "x"},
		{"-max-num-seqs", "-3"},
		{"-layers", "-1"},
		{"-prompt", "100-200"},
		{"-prompt", "200-100", "-output", "10"},
		{"-hours", "0"},
		{"-parallel", "-1"},
		{"-max-pods", "0"},
		{"stray"},
	} {
		if _, err := parseAdviseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("advise %q: no error", args)
		}
	}
	// Errors found once the flags parse: the advisor's own checks.
	for _, args := range [][]string{{"-slo-target", "2"}, {"-steady-qps", "0"}, {"-max-ooms", "-1"}, {"-hours", "0.1", "-burst-every", "1h"}} {
		if err := run(t.Context(), append([]string{"advise"}, args...), &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
			t.Errorf("advise %q: no error", args)
		}
	}
}

func TestAdviseRuns(t *testing.T) {
	args := []string{"advise", "-gpus", "H100-80G,A10G", "-model", "llama-2-13b", "-gpu-memory-utilization", "0.9",
		"-steady-qps", "5", "-burst-qps", "8", "-hours", "0.05", "-burst-every", "3m", "-burst-length", "1m", "-max-pods", "4"}
	var out [2]bytes.Buffer
	var progress bytes.Buffer
	for i := range out {
		progress.Reset()
		if err := run(t.Context(), args, &out[i], &progress); err != nil {
			t.Fatal(err)
		}
	}
	if out[0].String() != out[1].String() {
		t.Fatalf("the same flags gave two tables:\n%s\n%s", out[0].String(), out[1].String())
	}
	for _, s := range []string{"| H100-80G 80 GiB | 1 |", "| A10G 24 GiB | does not fit"} {
		if !strings.Contains(out[0].String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out[0].String())
		}
	}
	if lines := strings.Split(strings.TrimSpace(progress.String()), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "2/2") ||
		!strings.Contains(lines[1], "ETA") {
		t.Errorf("progress:\n%s", progress.String())
	}
	var js bytes.Buffer
	if err := run(t.Context(), append(args, "-json"), &js, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Best []struct {
			GPU  string `json:"gpu"`
			Pods int    `json:"pods"`
			Fits bool   `json:"fits"`
		} `json:"best"`
	}
	if err := json.Unmarshal(js.Bytes(), &rep); err != nil || len(rep.Best) != 2 || rep.Best[0].Pods != 1 || rep.Best[1].Fits {
		t.Fatalf("-json (%v): %s", err, js.String())
	}
}
