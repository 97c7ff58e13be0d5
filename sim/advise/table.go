package advise

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteTable prints the report as Markdown: the traffic and the target, the
// capacity table (one row per GPU, the seed's table with the figures behind
// it), then every grid point.
func WriteTable(w io.Writer, r Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s; steady %g QPS, bursts %g QPS; SLO target %s, at most %d OOMs a pod in %gh; seed %d\n\n",
		r.Model, r.SteadyQPS, r.BurstQPS, pct(r.SLOTarget), r.MaxOOMs, r.Hours, r.Seed)
	b.WriteString("| GPU | pods | headroom (gpu_memory_utilization) | max_num_seqs | OOMs | SLO attainment | effective memory use | KV cache |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range r.Best {
		writeRow(&b, p, r.MaxPods, false)
	}
	b.WriteString("\n| GPU | gpu_memory_utilization | max_num_seqs | pods | QPS a pod (burst) | OOMs | SLO attainment | effective memory use | KV cache | replays |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range r.Points {
		writeRow(&b, p, r.MaxPods, true)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRow(b *strings.Builder, p Point, maxPods int, grid bool) {
	if !p.Fits {
		if grid {
			fmt.Fprintf(b, "| %s | %.2f | – | does not fit: %s | | | | | | |\n", p.GPU, p.GPUMemoryUtilization, strings.TrimPrefix(p.NotFit, "sim: "))
		} else {
			fmt.Fprintf(b, "| %s %.0f GiB | does not fit at any gpu_memory_utilization tried | | | | | | |\n", p.GPU, gib(p.GPUMemoryBytes))
		}
		return
	}
	pods := fmt.Sprint(p.Pods)
	if !p.Met {
		pods = fmt.Sprintf("> %d", maxPods)
	}
	kv := fmt.Sprintf("%.1f GiB (%s of the GPU)", gib(p.KVCacheBytes), pct(p.KVShare))
	if grid {
		fmt.Fprintf(b, "| %s | %.2f | %d | %s | %.1f (%.1f) | %d | %s | %s | %s | %d |\n", p.GPU, p.GPUMemoryUtilization, p.MaxNumSeqs, pods,
			p.SteadyQPS, p.BurstQPS, p.OOMs, pct(p.SLOAttainment), pct(p.EffectiveMemoryUse), kv, p.Runs)
		return
	}
	fmt.Fprintf(b, "| %s %.0f GiB | %s | %s, %.1f GiB (%.2f) | %d | %d | %s | %s | %s |\n", p.GPU, gib(p.GPUMemoryBytes), pods,
		pct(p.Headroom), gib(p.HeadroomBytes), p.GPUMemoryUtilization, p.MaxNumSeqs, p.OOMs, pct(p.SLOAttainment), pct(p.EffectiveMemoryUse), kv)
}

// WriteJSON prints the report as one indented JSON object.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func pct(x float64) string { return fmt.Sprintf("%.1f %%", 100*x) }

func gib(b int64) float64 { return float64(b) / (1 << 30) }
