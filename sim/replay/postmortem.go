package replay

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// postmortemRounds is how many pressure rounds before an OOM a timeline
// keeps: 20 s at the default 500 ms.
const postmortemRounds = 40

// RoundRecord is one sampling round as an OOM's timeline shows it.
type RoundRecord struct {
	At time.Duration
	// Alive is false while the engine restarts.
	Alive bool
	// Running and Waiting are vLLM's sequences running and queued;
	// KVCacheUsage its KV usage.
	Running, Waiting int
	KVCacheUsage     float64
	// Level, Phase, Window, Ceiling (0: none), InFlight (sequences) and
	// Queue (waiters) and Order are gatekeeper's (Gatekeeper runs only).
	Level                            breaker.Level
	Phase                            breaker.Phase
	Window, Ceiling, InFlight, Queue int
	Order                            queue.Order
	// Started counts, per trace class, the requests that reached the
	// engine since the previous round: what gatekeeper released.
	Started []int
}

// OOMTimeline is one death of the engine: the failed step and the rounds
// before it, oldest first.
type OOMTimeline struct {
	OOM    sim.OOM
	Rounds []RoundRecord
}

// postmortem keeps the last rounds for the timelines. Its zero value is
// ready.
type postmortem struct {
	ring    [postmortemRounds]RoundRecord
	n, next int
	started []int // since the last round, by class
}

func (p *postmortem) startedOne(class int) {
	if class >= len(p.started) {
		p.started = append(p.started, make([]int, class+1-len(p.started))...)
	}
	p.started[class]++
}

// round records one round and resets the started counts.
func (p *postmortem) round(rec RoundRecord) {
	rec.Started = p.started
	p.started = make([]int, len(p.started))
	p.ring[p.next] = rec
	p.next = (p.next + 1) % postmortemRounds
	p.n = min(p.n+1, postmortemRounds)
}

// timeline returns the rounds kept, oldest first.
func (p *postmortem) timeline() []RoundRecord {
	out := make([]RoundRecord, 0, p.n)
	for i := range p.n {
		out = append(out, p.ring[(p.next-p.n+i+postmortemRounds)%postmortemRounds])
	}
	return out
}

// recordRound keeps this round for the timelines.
func (r *runner) recordRound() {
	p := r.pods[0] // a pool's timelines follow its first pod
	m := p.e.Metrics()
	rec := RoundRecord{At: r.t, Alive: m.Alive, Running: m.Running, Waiting: m.Waiting, KVCacheUsage: m.KVCacheUsage}
	if r.ctl != nil {
		st, _, _ := r.ctl.State(p.name)
		qs := r.core.Stats()
		rec.Level, rec.Phase, rec.Window, rec.Queue, rec.Order = st.Level, st.Phase, st.Limit, qs.Length, qs.Order
		rec.Ceiling, _ = r.ctl.Ceiling(p.name)
		if len(qs.Windows) > 0 {
			rec.InFlight = qs.Windows[0].InFlight
		}
	}
	r.pm.round(rec)
}

// WriteTimelines prints each OOM's step and the rounds before it, as text
// for a person: where the batch stood, what gatekeeper released, in which
// order, and what the allocator held when the step failed.
func WriteTimelines(w io.Writer, classes []string, ts []OOMTimeline) error {
	var b strings.Builder
	for i, t := range ts {
		o := t.OOM
		a := o.Alloc
		fmt.Fprintf(&b, "OOM %d at %s: a step of %d tokens over %d sequences, %d sampling (top-p %v, logprobs %v, prompt logits %d); %d running, %d waiting in vLLM\n",
			i+1, fmtDur(o.At), o.Tokens, o.Seqs, o.Samples, o.TopP, o.Logprobs, o.PromptLogits, o.Running, o.Waiting)
		fmt.Fprintf(&b, "  allocator: %.0f MB free on the device, %.0f MB cached free (largest %.0f MB, %.0f MB stranded in split segments), %d retries; %v\n",
			mb(a.DeviceFreeBytes), mb(a.CachedFreeBytes), mb(a.LargestCachedFreeBytes), mb(a.InactiveSplitBytes), a.NumAllocRetries, o.Err)
		fmt.Fprintf(&b, "  %8s %5s %7s %7s %5s %9s %10s %6s %7s %8s %5s %15s  started (%s)\n",
			"t", "alive", "running", "waiting", "kv", "level", "phase", "window", "ceiling", "inflight", "queue", "order", strings.Join(classes, ", "))
		for _, r := range t.Rounds {
			started := make([]string, len(classes))
			for c := range classes {
				n := 0
				if c < len(r.Started) {
					n = r.Started[c]
				}
				started[c] = fmt.Sprint(n)
			}
			fmt.Fprintf(&b, "  %8.1f %5v %7d %7d %5.2f %9v %10v %6d %7d %8d %5d %15v  %s\n",
				r.At.Seconds(), r.Alive, r.Running, r.Waiting, r.KVCacheUsage, r.Level, r.Phase, r.Window, r.Ceiling,
				r.InFlight, r.Queue, r.Order, strings.Join(started, ", "))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func mb(b int64) float64 { return float64(b) / 1e6 }
