package config

import (
	"fmt"
	"math"
	"slices"
	"time"
)

func (k *checker) upstreams(us []Upstream) {
	if len(us) == 0 {
		k.add("upstreams", "at least one upstream is required")
	}
	names := map[string]int{}
	urls := map[string]int{}
	for i, u := range us {
		p := fmt.Sprintf("upstreams[%d]", i)
		if u.Name == "" {
			k.add(p+".name", "required (it defaults to the url's host:port only when the url is valid)")
		} else if j, dup := names[u.Name]; dup {
			k.add(p+".name", "%q is already the name of upstreams[%d]", u.Name, j)
		} else {
			names[u.Name] = i
		}
		if k.url(p+".url", u.URL, urlUpstream) && u.InferencePool == nil { // a pool's url is a template
			if j, dup := urls[u.URL]; dup {
				k.add(p+".url", "%q is already the url of upstreams[%d]", u.URL, j)
			}
			urls[u.URL] = i
		}
		k.inferencePool(p, u)
		if u.DNSInterval < 0 || (u.DNSInterval > 0 && u.DNSInterval < time.Second) {
			k.add(p+".dns_interval", "must be 0 (off) or at least 1s, got %v", u.DNSInterval)
		}
		k.atLeast(p+".max_inflight", int64(u.MaxInflight), 1)
		k.atLeast(p+".min_inflight", int64(u.MinInflight), 1)
		k.atLeast(p+".vocab_size", u.VocabSize, 0)
		k.atLeast(p+".max_inflight_tokens", u.MaxInflightTokens, 0)
		if u.MinInflight > u.MaxInflight && u.MaxInflight >= 1 {
			k.add(p+".min_inflight", "must not exceed max_inflight (%d), got %d", u.MaxInflight, u.MinInflight)
		}
		for j, g := range u.GPUs {
			if g == "" {
				k.add(fmt.Sprintf("%s.gpus[%d]", p, j), "must not be empty")
			} else if slices.Index(u.GPUs, g) < j {
				k.add(fmt.Sprintf("%s.gpus[%d]", p, j), "%q is listed twice", g)
			}
		}
		for j, s := range u.Sources {
			sp := fmt.Sprintf("%s.sources[%d]", p, j)
			k.source(sp, s)
			if (s.Kind == SourceNVML || s.Kind == SourceDCGM) && len(u.GPUs) == 0 {
				k.add(sp+".kind", "%s reads every GPU of the node; list this pod's GPU ids in %s.gpus", s.Kind, p)
			}
		}
		for j, m := range u.Models {
			if m == "" {
				k.add(fmt.Sprintf("%s.models[%d]", p, j), "must not be empty")
			} else if slices.Index(u.Models, m) < j {
				k.add(fmt.Sprintf("%s.models[%d]", p, j), "%q is listed twice", m)
			}
		}
		k.upstreamRules(p+".rules", u.Rules)
	}
}

func (k *checker) modelLimits(m map[string]ModelLimit) {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := "model_limits." + name
		k.positive(p+".qps", m[name].QPS)
		if m[name].QPS > 0 {
			k.atLeast(p+".burst", int64(m[name].Burst), 1)
		}
	}
}

func (k *checker) source(path string, s Source) {
	k.oneOf(path+".kind", string(s.Kind), SourceNVML, SourceVLLM, SourceDCGM, SourceMemoryBlocks)
	switch {
	case s.Kind == SourceNVML && s.URL != "":
		k.add(path+".url", "nvml reads the local GPUs and takes no url")
	case s.Kind != SourceNVML:
		k.url(path+".url", s.URL, urlSource)
	}
	k.notNegative(path+".timeout", s.Timeout, "0 derives it from pressure.interval")
	if st := k.c.Pressure.StaleAfter; s.Timeout > st && st > 0 {
		k.add(path+".timeout", "must not exceed pressure.stale_after (%v), or every slow reading is stale, got %v", st, s.Timeout)
	}
}

// sourceNames checks that source names are unique over the whole file:
// they label the source metrics.
func (k *checker) sourceNames() {
	seen := map[string]string{}
	check := func(path string, s Source) {
		if s.Name == "" {
			if s.Kind != "" {
				k.add(path+".name", "required (it defaults to kind:url only when the url is set)")
			}
			return
		}
		if first, dup := seen[s.Name]; dup {
			k.add(path+".name", "%q is already the name of %s; give one of them a name", s.Name, first)
			return
		}
		seen[s.Name] = path
	}
	for i, u := range k.c.Upstreams {
		for j, s := range u.Sources {
			check(fmt.Sprintf("upstreams[%d].sources[%d]", i, j), s)
		}
	}
	for j, s := range k.c.Pressure.Sources {
		check(fmt.Sprintf("pressure.sources[%d]", j), s)
	}
}

func (k *checker) pressure(p Pressure) {
	k.duration("pressure.interval", p.Interval)
	if p.StaleAfter <= p.Interval {
		k.add("pressure.stale_after", "must be longer than pressure.interval (%v), got %v", p.Interval, p.StaleAfter)
	}
	k.oneOf("pressure.on_stale", string(p.OnStale), OnStaleDegrade, OnStaleHold, OnStaleIgnore)
	if !(p.Hysteresis >= 0 && p.Hysteresis < 1) {
		k.add("pressure.hysteresis", "must be a fraction ≥ 0 and below 1, got %v", p.Hysteresis)
	}
	k.notNegative("pressure.hold", p.Hold, "")
	for j, s := range p.Sources {
		sp := fmt.Sprintf("pressure.sources[%d]", j)
		k.source(sp, s)
		if s.Kind == SourceVLLM {
			k.add(sp+".kind", "vllm metrics belong to one pod; list this source under that upstream's sources")
		}
	}
	sigs := make([]Signal, 0, len(p.Rules))
	for sig := range p.Rules {
		sigs = append(sigs, sig)
	}
	slices.Sort(sigs) // report in a stable order
	for _, sig := range sigs {
		k.rule("pressure.rules", sig, p.Rules[sig])
	}
}

// upstreamRules checks an upstream's rule overrides; `{}` or null removes
// a rule for that pod and needs no check.
func (k *checker) upstreamRules(prefix string, rules map[Signal]Rule) {
	sigs := make([]Signal, 0, len(rules))
	for sig := range rules {
		sigs = append(sigs, sig)
	}
	slices.Sort(sigs)
	for _, sig := range sigs {
		k.rule(prefix, sig, rules[sig])
	}
}

func (k *checker) rule(prefix string, sig Signal, r Rule) {
	path := prefix + "." + string(sig)
	if !slices.Contains(Signals(), sig) {
		k.add(path, "unknown signal; known signals are %v", Signals())
		return
	}
	for _, t := range []struct {
		name string
		v    *float64
	}{{"degrade", r.Degrade}, {"shed", r.Shed}} {
		if t.v == nil {
			continue
		}
		v := *t.v
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			k.add(path+"."+t.name, "must be a finite number, got %v", v)
		case sig == signalFragmentation && v <= 1:
			k.add(path+"."+t.name, "must be above 1 (the ratio total free ÷ largest free block is never below 1), got %v", v)
		case (sig == signalKVCacheUsage || sig == signalMemoryUsed) && !(v > 0 && v <= 1):
			k.add(path+"."+t.name, "must be a fraction above 0 and at most 1, got %v", v)
		case v <= 0:
			k.add(path+"."+t.name, "must be positive, got %v", v)
		}
	}
	switch {
	case r.Horizon < 0 || r.Horizon > time.Minute:
		k.add(path+".horizon", "must be between 0 and 1m (a projection further ahead is a guess), got %v", r.Horizon)
	case r.Horizon > 0 && r.Degrade == nil && r.Shed == nil:
		k.add(path+".horizon", "needs a degrade or shed threshold to project against")
	}
	switch {
	case r.For < 0 || r.For > time.Minute:
		k.add(path+".for", "must be between 0 and 1m (a level that waits longer reacts after the damage), got %v", r.For)
	case r.For > 0 && r.Degrade == nil && r.Shed == nil:
		k.add(path+".for", "needs a degrade or shed threshold to hold")
	}
	finite := func(v *float64) bool { return !math.IsNaN(*v) && !math.IsInf(*v, 0) }
	if r.Degrade != nil && r.Shed != nil && finite(r.Degrade) && finite(r.Shed) && *r.Shed <= *r.Degrade {
		k.add(path+".shed", "must be above degrade (%v), got %v", *r.Degrade, *r.Shed)
	}
}
