package replay

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// Range is an inclusive range of token counts, drawn uniformly. It is the
// request mix shared with the other traffic generators (sim/traffic).
type Range = traffic.Range

// Class is one kind of request in the trace; Name labels it in the table.
type Class = traffic.Class

// TraceSettings describes a synthetic trace: Poisson arrivals at BaseQPS,
// with bursts at BurstQPS for BurstLength every BurstEvery. The zero value
// selects the defaults of issue 5 (README.md in this folder).
type TraceSettings struct {
	// Duration is the virtual length of the trace. 0 means 24h.
	Duration time.Duration
	// BaseQPS is the steady arrival rate. 0 means 50.
	BaseQPS float64
	// BurstQPS is the rate during bursts. 0 means 80.
	BurstQPS float64
	// BurstEvery is the time from one burst's start to the next. 0 means 30m.
	BurstEvery time.Duration
	// BurstLength is how long a burst lasts. 0 means 5m.
	BurstLength time.Duration
	// Classes is the request mix. Nil means DefaultClasses.
	Classes []Class
	// TopPFraction is the share of requests sampling with top-p. 0 means 0.5.
	TopPFraction float64
	// PromptLogprobsFraction is the share of requests asking for
	// prompt_logprobs (evaluation and scoring jobs). 0 means none, and then
	// the trace draws exactly what it drew before the field existed.
	PromptLogprobsFraction float64
	// NFraction is the share of requests asking for N sequences (the
	// request's n: best-of-n sampling, RL rollouts that sample a group of
	// answers per prompt). 0 means none, and then the trace draws exactly
	// what it drew before the field existed.
	NFraction float64
	// N is those requests' n. 0 means DefaultN.
	N int
	// Seed drives the arrivals and lengths.
	Seed uint64
}

// DefaultN is the n of the requests NFraction picks: a round group size for
// best-of-n and GRPO-style rollouts, not taken from a measured trace.
const DefaultN = 8

// DefaultClasses is the default mix: 85 % short chat, 15 % long documents.
func DefaultClasses() []Class {
	return []Class{
		{Name: "short", Weight: 0.85, Prompt: Range{Min: 50, Max: 250}, Output: Range{Min: 20, Max: 150}, MaxTokens: 256},
		{Name: "long", Weight: 0.15, Prompt: Range{Min: 1000, Max: 2000}, Output: Range{Min: 100, Max: 300}, MaxTokens: 512},
	}
}

func (s TraceSettings) withDefaults() TraceSettings {
	if s.Duration == 0 {
		s.Duration = 24 * time.Hour
	}
	if s.BaseQPS == 0 {
		s.BaseQPS = 50
	}
	if s.BurstQPS == 0 {
		s.BurstQPS = 80
	}
	if s.BurstEvery == 0 {
		s.BurstEvery = 30 * time.Minute
	}
	if s.BurstLength == 0 {
		s.BurstLength = 5 * time.Minute
	}
	if s.Classes == nil {
		s.Classes = DefaultClasses()
	}
	if s.TopPFraction == 0 {
		s.TopPFraction = 0.5
	}
	if s.N == 0 {
		s.N = DefaultN
	}
	return s
}

func (s TraceSettings) validate() error {
	if s.Duration < 0 || s.BaseQPS <= 0 || s.BurstQPS <= 0 || s.BurstEvery <= 0 || s.BurstLength < 0 || s.BurstLength > s.BurstEvery {
		return fmt.Errorf("replay: TraceSettings %+v: durations and rates must be > 0, BurstLength ≤ BurstEvery", s)
	}
	for i, c := range s.Classes {
		if !c.Valid() {
			return fmt.Errorf("replay: TraceSettings.Classes[%d] %q: weight > 0, ranges ≥ 1, MaxTokens ≥ Output.Max", i, c.Name)
		}
	}
	if s.PromptLogprobsFraction < 0 || s.PromptLogprobsFraction > 1 {
		return fmt.Errorf("replay: TraceSettings.PromptLogprobsFraction = %v, want [0, 1]", s.PromptLogprobsFraction)
	}
	if s.NFraction < 0 || s.NFraction > 1 || s.N < 1 || s.N > 1024 {
		return fmt.Errorf("replay: TraceSettings.NFraction = %v, N = %d, want [0, 1] and 1–1024", s.NFraction, s.N)
	}
	if s.TopPFraction < 0 || s.TopPFraction > 1 {
		return fmt.Errorf("replay: TraceSettings.TopPFraction = %v, want [0, 1]", s.TopPFraction)
	}
	return nil
}

// Arrival is one request of the trace.
type Arrival struct {
	At                       time.Duration
	Class                    int
	Prompt, Output, MaxToken int
	TopP                     bool
	PromptLogprobs           bool
	// N is how many sequences the request samples (its n); 0 means 1.
	N int
	// Tenant is who sent it (TenantTrace); "" for a trace without tenants.
	Tenant string
	// Content, if set, is its prompt's text as segments (Segment), Prompt
	// tokens in all: the pods' prefix caches and gatekeeper's router see
	// it. Nil: a prompt that shares nothing with any other. (A pointer, so
	// that an Arrival stays comparable.)
	Content *Content
}

// Trace yields the arrivals of a synthetic trace in time order. Create one
// with NewTrace. Not safe for concurrent use.
type Trace struct {
	s   TraceSettings
	p   traffic.Pattern
	rng *rand.Rand // shared by the arrival times and the request draws, in that order
	arr *traffic.Arrivals
}

// NewTrace returns a trace for s; the same settings give the same arrivals.
func NewTrace(s TraceSettings) (*Trace, error) {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return nil, err
	}
	tr := &Trace{s: s, rng: rand.New(rand.NewPCG(s.Seed, 0x5eed)), p: traffic.Pattern{
		BaseQPS: s.BaseQPS, BurstQPS: s.BurstQPS, Steady: s.BurstEvery - s.BurstLength, Burst: s.BurstLength}}
	tr.arr = traffic.NewArrivals(tr.p, tr.rng)
	return tr, nil
}

// Settings returns the settings with defaults filled in.
func (tr *Trace) Settings() TraceSettings { return tr.s }

// InBurst reports whether t falls in a burst (the burst closes each period).
func (tr *Trace) InBurst(t time.Duration) bool {
	return tr.p.Rate(t) == tr.s.BurstQPS && tr.s.BurstLength > 0
}

// Next returns the next arrival, or false past Duration. Arrivals are
// Poisson with a piecewise-constant rate (traffic.Arrivals: thinning against
// the higher rate); then the class, prompt, output and top-p are drawn, in
// that order, from the same generator.
func (tr *Trace) Next() (Arrival, bool) {
	at := tr.arr.Next()
	if at >= tr.s.Duration {
		return Arrival{}, false
	}
	ci := traffic.Mix(tr.s.Classes).Pick(tr.rng)
	c := tr.s.Classes[ci]
	a := Arrival{At: at, Class: ci, Prompt: c.Prompt.Draw(tr.rng), Output: c.Output.Draw(tr.rng),
		MaxToken: c.MaxTokens, TopP: tr.rng.Float64() < tr.s.TopPFraction, PromptLogprobs: c.PromptLogprobs}
	if tr.s.PromptLogprobsFraction > 0 { // drawn only then: the default trace is unchanged
		a.PromptLogprobs = tr.rng.Float64() < tr.s.PromptLogprobsFraction || a.PromptLogprobs
	}
	if tr.s.NFraction > 0 && tr.rng.Float64() < tr.s.NFraction { // likewise
		a.N = tr.s.N
	}
	return a, true
}
