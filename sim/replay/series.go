package replay

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
)

// Sample is one point of a run's time series.
type Sample struct {
	// At is the virtual time.
	At time.Duration
	// Alive is false while the engine restarts.
	Alive bool
	// Running and Waiting are vLLM's gauges; KVCacheUsage its KV usage.
	Running, Waiting int
	KVCacheUsage     float64
	// Fragmentation is the breaker's ratio, free ÷ largest free block (≥ 1).
	Fragmentation float64
	// MemoryUsed is NVML used ÷ total.
	MemoryUsed float64
	// Level, Window and Queue are gatekeeper's (Gatekeeper runs only).
	Level  breaker.Level
	Window int
	Queue  int
	// OOMs counts the engine's deaths so far.
	OOMs int64
}

// record appends a sample when one is due.
func (r *runner) record() {
	if r.s.SeriesEvery <= 0 || r.t < r.nextRecord {
		return
	}
	r.nextRecord = r.t + r.s.SeriesEvery
	p := r.pods[0] // a pool's series follows its first pod
	m := p.e.Metrics()
	sm := Sample{At: r.t, Alive: m.Alive, Running: m.Running, Waiting: m.Waiting, KVCacheUsage: m.KVCacheUsage,
		MemoryUsed: float64(m.Device.UsedBytes) / float64(m.Device.TotalBytes), OOMs: m.OOMs}
	if m.Alive {
		mb := p.e.MemoryBlocks(p.gpu)
		sm.Fragmentation = 1
		if mb.LargestFreeBlockBytes > 0 {
			sm.Fragmentation = float64(mb.FreeBytes) / float64(mb.LargestFreeBlockBytes)
		}
	}
	if r.ctl != nil {
		st, _, _ := r.ctl.State(p.name)
		sm.Level, sm.Window, sm.Queue = st.Level, st.Limit, r.core.Len()
	}
	r.res.Series = append(r.res.Series, sm)
}

// WriteSeriesCSV writes samples as CSV with a header row.
func WriteSeriesCSV(w io.Writer, samples []Sample) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"seconds", "alive", "running", "waiting", "kv_cache_usage", "fragmentation",
		"memory_used", "level", "window", "queue", "ooms"})
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	for _, s := range samples {
		_ = cw.Write([]string{f(s.At.Seconds()), strconv.FormatBool(s.Alive), strconv.Itoa(s.Running),
			strconv.Itoa(s.Waiting), f(s.KVCacheUsage), f(s.Fragmentation), f(s.MemoryUsed), s.Level.String(),
			strconv.Itoa(s.Window), strconv.Itoa(s.Queue), strconv.FormatInt(s.OOMs, 10)})
	}
	cw.Flush()
	return cw.Error()
}

// WriteSeriesSVG draws three panels — pressure (fragmentation ratio, memory
// used, KV usage), the batch (window, running) and the queues (gatekeeper's,
// vLLM's waiting) — with a red line at every OOM.
func WriteSeriesSVG(w io.Writer, title string, samples []Sample) error {
	const width, panelH, left, top = 900.0, 160.0, 50.0, 30.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n",
		width+left+20, top+3*(panelH+30)+10)
	fmt.Fprintf(&b, `<text x="%.0f" y="18" font-size="13">%s</text>`+"\n", left, escape(title))
	if len(samples) == 0 {
		b.WriteString("</svg>\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	end := samples[len(samples)-1].At.Seconds()
	x := func(s Sample) float64 { return left + width*s.At.Seconds()/max(end, 1) }
	type line struct {
		name, color string
		v           func(Sample) float64
	}
	panels := []struct {
		name  string
		lines []line
	}{
		{"pressure", []line{
			{"fragmentation (free ÷ largest)", "#d62728", func(s Sample) float64 { return s.Fragmentation }},
			{"memory used", "#1f77b4", func(s Sample) float64 { return s.MemoryUsed }},
			{"kv cache usage", "#2ca02c", func(s Sample) float64 { return s.KVCacheUsage }}}},
		{"batch", []line{
			{"window", "#9467bd", func(s Sample) float64 { return float64(s.Window) }},
			{"running", "#8c564b", func(s Sample) float64 { return float64(s.Running) }}}},
		{"queues", []line{
			{"gatekeeper queue", "#e377c2", func(s Sample) float64 { return float64(s.Queue) }},
			{"vLLM waiting", "#7f7f7f", func(s Sample) float64 { return float64(s.Waiting) }}}},
	}
	for i, p := range panels {
		y0 := top + float64(i)*(panelH+30) + 15
		hi := 0.0
		for _, l := range p.lines {
			for _, s := range samples {
				hi = max(hi, l.v(s))
			}
		}
		hi = max(hi, 1e-9)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#ccc"/>`+"\n", left, y0, width, panelH)
		fmt.Fprintf(&b, `<text x="2" y="%.0f">%s</text><text x="2" y="%.0f">%.3g</text>`+"\n", y0+panelH/2, p.name, y0+10, hi)
		for j, l := range p.lines {
			var pts strings.Builder
			for _, s := range samples {
				fmt.Fprintf(&pts, "%.1f,%.1f ", x(s), y0+panelH-panelH*l.v(s)/hi)
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1" points="%s"/>`+"\n", l.color, pts.String())
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", left+5+float64(j)*200, y0+panelH+12, l.color, escape(l.name))
		}
	}
	var last int64
	for _, s := range samples {
		if s.OOMs > last {
			last = s.OOMs
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="red" stroke-width="1.5"/>`+"\n",
				x(s), x(s), top, top+3*(panelH+30))
		}
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">0</text><text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n",
		left, top+3*(panelH+30)+5, left+width, top+3*(panelH+30)+5, time.Duration(end*float64(time.Second)).Round(time.Second).String())
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
