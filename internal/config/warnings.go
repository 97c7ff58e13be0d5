package config

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Warning is a policy choice that validates but most likely does not do
// what its author meant: a pod the slow breaker cannot see, memory
// admission without the reading it needs, replicas that do not share their
// limits. Warnings never make Parse fail; `gatekeeper -check` lists them.
type Warning struct {
	// Path is the key path the warning is about, as in FieldError.
	Path string
	// Line is the 1-based line of Path (or of its nearest ancestor) in the
	// file, or 0 when neither is written there.
	Line int
	// Msg says what is likely wrong and what it does.
	Msg string
}

// String reads "config: line 12: upstreams[0].sources: warning: no pressure
// source reads this pod: …", the shape of FieldError's message.
func (w Warning) String() string { return Located("config", w.Line, w.Path, "warning: "+w.Msg) }

// Warnings returns c's warnings for a deployment of replicas gatekeepers
// running this policy, ordered by line (those not in the file last).
// replicas 0 means not known: as many as cluster.replicas says, or 1
// without a cluster section, so that a policy is not warned about a count
// nobody stated. c should be valid (Parse, Load or LoadFile returned it). It
// reports:
//   - an upstream that no pressure source reads: none of its own, and no
//     node-level pressure.sources entry that can cover it (node readings
//     are matched to pods by upstreams[].gpus, so a pod without gpus gets
//     none);
//   - an upstream with vocab_size > 0 and no memory_blocks source reading
//     it (its own, or a node-level one and gpus): memory admission then
//     never has a free-memory reading and stays off;
//   - replicas > 1 without a cluster section (each replica enforces every
//     limit and window whole), and a cluster.replicas (0 meaning 1) other
//     than replicas (the share each takes until Redis first answers);
//   - an endpoint picker whose health kubelet cannot probe (TLS without the
//     plaintext health listener, or that listener on loopback);
//   - a queue.max_wait the file sets that is longer than a time-to-first-
//     token deadline it does not set: queue.ttft_deadline's default, for
//     every request or every class without its own (see deadline).
//
// The result is nil when there is nothing to say.
func (c *Config) Warnings(replicas int) []Warning {
	w := &warner{c: c}
	nodeBlocks := slices.ContainsFunc(c.Pressure.Sources, func(s Source) bool { return s.Kind == SourceMemoryBlocks })
	for i, u := range c.Upstreams {
		w.upstream(fmt.Sprintf("upstreams[%d]", i), u, nodeBlocks)
	}
	if replicas < 1 {
		replicas = 1
		if c.Cluster != nil {
			replicas = cmp.Or(c.Cluster.Replicas, 1)
		}
	}
	w.cluster(replicas)
	w.picker()
	w.deadline()
	slices.SortStableFunc(w.ws, func(a, b Warning) int { return cmp.Compare(lineOrLast(a.Line), lineOrLast(b.Line)) })
	return w.ws
}

// warner collects warnings, looking up each path's line in c.
type warner struct {
	c  *Config
	ws []Warning
}

func (w *warner) add(path, format string, args ...any) {
	w.ws = append(w.ws, Warning{Path: path, Line: w.c.Line(path), Msg: fmt.Sprintf(format, args...)})
}

// upstream warns about the pod at path p; nodeBlocks says whether
// pressure.sources holds a memory_blocks source.
func (w *warner) upstream(p string, u Upstream, nodeBlocks bool) {
	node := len(w.c.Pressure.Sources) > 0
	switch {
	case len(u.Sources) > 0 || len(u.GPUs) > 0 && node:
	case node:
		w.add(p+".sources", "no pressure source reads this pod: pressure.sources are matched to pods by gpus and %s.gpus is empty, so the slow breaker has no signal for it", p)
	default:
		w.add(p+".sources", "no pressure source reads this pod: the slow breaker has no signal for it (list its vLLM /metrics here)")
	}
	ownBlocks := slices.ContainsFunc(u.Sources, func(s Source) bool { return s.Kind == SourceMemoryBlocks })
	if u.VocabSize > 0 && !ownBlocks && !(nodeBlocks && len(u.GPUs) > 0) {
		w.add(p+".vocab_size", "memory admission needs a memory_blocks source for this pod (its own, or one in pressure.sources and %s.gpus): without its free_bytes the memory budget is never set and admission stays off", p)
	}
}

// cluster warns when the cluster section does not fit replicas (≥ 1).
func (w *warner) cluster(replicas int) {
	cl := w.c.Cluster
	switch {
	case cl == nil && replicas > 1:
		w.add("cluster", "%d replicas without a cluster section: each enforces every limit and window alone, so the pods can get %d× fast_breaker.qps and %d× each max_inflight", replicas, replicas, replicas)
	case cl != nil && cmp.Or(cl.Replicas, 1) != replicas:
		r := cmp.Or(cl.Replicas, 1)
		is, share := strconv.Itoa(cl.Replicas), fmt.Sprintf("1/%d of every limit and window, %d/%d of them together", r, replicas, r)
		if cl.Replicas == 0 {
			is = "1 (not set)"
		}
		if r == 1 {
			share = fmt.Sprintf("every limit and window whole, %d× them together", replicas)
		}
		run := fmt.Sprintf("%d replicas run", replicas)
		if replicas == 1 {
			run = "1 replica runs"
		}
		w.add("cluster.replicas", "is %s, but %s: until Redis first answers each takes %s", is, run, share)
	}
}

// deadline warns when the file sets queue.max_wait but not
// queue.ttft_deadline, and the default deadline, shorter than max_wait,
// applies to some requests (every request without classes; else those of
// the classes without a ttft_deadline of their own). Such a request is
// answered 503 deadline by the default deadline and never waits max_wait,
// which the author most likely meant it to (issue 35). A deadline the file
// writes is a choice made beside max_wait, as in the annotated default
// (30s and 1500ms: max_wait bounds the classes with a longer deadline), so
// it is not warned about; neither is observe mode, which enforces no
// deadline.
func (w *warner) deadline() {
	c, q := w.c, w.c.Queue
	if !c.written("queue.max_wait") || c.written("queue.ttft_deadline") || c.Mode == ModeObserve ||
		q.TTFTDeadline <= 0 || q.TTFTDeadline >= q.MaxWait {
		return
	}
	who, fix := "every request", ""
	if c.Classes != nil {
		var names []string
		for _, cl := range c.Classes.List {
			if cl.TTFTDeadline <= 0 {
				names = append(names, strconv.Quote(cl.Name))
			}
		}
		if len(names) == 0 {
			return // every class has its own deadline
		}
		who = "every request of class " + strings.Join(names, ", ") + " (no ttft_deadline of its own)"
		fix = ", or give a class that should wait longer its own classes.list[].ttft_deadline"
	}
	d, mw := formatDuration(q.TTFTDeadline), formatDuration(q.MaxWait)
	w.add("queue.max_wait", "%s is longer than queue.ttft_deadline, which this file does not set: its default %s applies to %s, "+
		"which gets 503 deadline once it cannot start within %s and so never waits %s; set queue.ttft_deadline "+
		"(0s: no deadline, max_wait alone)%s", mw, d, who, d, mw, fix)
}

// lineOrLast orders warnings without a line after those with one.
func lineOrLast(line int) int {
	if line > 0 {
		return line
	}
	return math.MaxInt
}
