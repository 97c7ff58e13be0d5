package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), []string{"-h"}, &out, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run(-h) = %v, want flag.ErrHelp", err)
	}
	for _, name := range []string{"-listen", "-gpu-memory-utilization", "-max-num-seqs", "-max-num-batched-tokens",
		"-block-size", "-speed", "-restart-time", "-max-split-size-mb", "-other-process-mib", "-seed"} {
		if !strings.Contains(out.String(), name+" ") {
			t.Fatalf("-h output lacks %s:\n%s", name, out.String())
		}
	}
}

func TestFlagsMapOntoSettings(t *testing.T) {
	o, err := parseFlags([]string{"-gpu", "H100-80G", "-model", "llama-2-13b", "--gpu-memory-utilization", "0.85",
		"-other-process-mib", "2048", "-restart-time", "2m", "-speed", "10"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	es := o.engine
	if es.GPU.Name != "H100-80G" || es.Model.Layers != 40 || es.GPUMemoryUtilization != 0.85 ||
		es.OtherProcessBytes != 2<<30 || es.RestartTime != 2*time.Minute || o.server.Speed != 10 {
		t.Fatalf("settings = %+v / %+v", es, o.server)
	}
}

func TestRunErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"unknown gpu", []string{"-gpu", "V100"}},
		{"bad utilization", []string{"-gpu-memory-utilization", "1.5"}},
		{"stray argument", []string{"serve"}},
		{"bad listen", []string{"-listen", "not-an-address"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := run(t.Context(), tt.args, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
				t.Fatalf("run(%q) = nil, want an error", tt.args)
			}
		})
	}
}

func TestRunStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-listen", "127.0.0.1:0"}, &out, &out); err != nil {
		t.Fatalf("run with a cancelled context = %v, want nil", err)
	}
	if !strings.Contains(out.String(), "vllm-sim serving") {
		t.Fatalf("log = %s", out.String())
	}
}

func TestReplaySubcommand(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"replay", "-hours", "0.02", "-policies", "unprotected,gatekeeper"}, &out, &errOut)
	if err != nil {
		t.Fatalf("run(replay) = %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"OOM events", "unprotected", "gatekeeper", "gatekeeper vs unprotected", "SLO attainment"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("replay output lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(t.Context(), []string{"replay", "-policies", "magic"}, &out, &errOut); err == nil {
		t.Fatal("run(replay -policies magic) = nil, want an error")
	}
}

func TestReplayFromCSV(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(path, []byte("arrival_seconds,prompt_tokens,output_tokens\n0,100,10\n0.5,1200,20\n1,50,5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	dir := t.TempDir()
	if err := run(t.Context(), []string{"replay", "-trace", path, "-hours", "0", "-policies", "unprotected", "-out", dir}, &out, &errOut); err != nil {
		t.Fatalf("run(replay -trace) = %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "trace "+path) || !strings.Contains(out.String(), "p99 long") {
		t.Fatalf("output:\n%s", out.String())
	}
	for _, ext := range []string{".csv", ".svg"} {
		if m, _ := filepath.Glob(filepath.Join(dir, "*-unprotected"+ext)); len(m) != 1 {
			t.Fatalf("-out wrote %q for %s, want one file", m, ext)
		}
	}
}
