package replay

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Range is an inclusive range of token counts, drawn uniformly.
type Range struct{ Min, Max int }

func (r Range) draw(rng *rand.Rand) int { return r.Min + rng.IntN(r.Max-r.Min+1) }

func (r Range) valid() bool { return r.Min >= 1 && r.Max >= r.Min }

// Class is one kind of request in the trace.
type Class struct {
	// Name labels the class in the table ("short", "long").
	Name string
	// Weight is the class's share of arrivals, relative to the others.
	Weight float64
	// Prompt and Output are the prompt length and the tokens generated.
	Prompt, Output Range
	// MaxTokens is the max_tokens the client sends (≥ Output.Max).
	MaxTokens int
}

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
	// Seed drives the arrivals and lengths.
	Seed uint64
}

// DefaultClasses is the default mix: 85 % short chat, 15 % long documents.
func DefaultClasses() []Class {
	return []Class{
		{Name: "short", Weight: 0.85, Prompt: Range{50, 250}, Output: Range{20, 150}, MaxTokens: 256},
		{Name: "long", Weight: 0.15, Prompt: Range{1000, 2000}, Output: Range{100, 300}, MaxTokens: 512},
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
	return s
}

func (s TraceSettings) validate() error {
	if s.Duration < 0 || s.BaseQPS <= 0 || s.BurstQPS <= 0 || s.BurstEvery <= 0 || s.BurstLength < 0 || s.BurstLength > s.BurstEvery {
		return fmt.Errorf("replay: TraceSettings %+v: durations and rates must be > 0, BurstLength ≤ BurstEvery", s)
	}
	for i, c := range s.Classes {
		if c.Weight <= 0 || !c.Prompt.valid() || !c.Output.valid() || c.MaxTokens < c.Output.Max {
			return fmt.Errorf("replay: TraceSettings.Classes[%d] %q: weight > 0, ranges ≥ 1, MaxTokens ≥ Output.Max", i, c.Name)
		}
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
}

// Trace yields the arrivals of a synthetic trace in time order. Create one
// with NewTrace. Not safe for concurrent use.
type Trace struct {
	s     TraceSettings
	rng   *rand.Rand
	t     time.Duration
	total float64
}

// NewTrace returns a trace for s; the same settings give the same arrivals.
func NewTrace(s TraceSettings) (*Trace, error) {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return nil, err
	}
	tr := &Trace{s: s, rng: rand.New(rand.NewPCG(s.Seed, 0x5eed))}
	for _, c := range s.Classes {
		tr.total += c.Weight
	}
	return tr, nil
}

// Settings returns the settings with defaults filled in.
func (tr *Trace) Settings() TraceSettings { return tr.s }

// rate is the arrival rate at t.
func (tr *Trace) rate(t time.Duration) float64 {
	if t%tr.s.BurstEvery >= tr.s.BurstEvery-tr.s.BurstLength {
		return tr.s.BurstQPS // the burst closes each period
	}
	return tr.s.BaseQPS
}

// InBurst reports whether t falls in a burst.
func (tr *Trace) InBurst(t time.Duration) bool {
	return tr.rate(t) == tr.s.BurstQPS && tr.s.BurstLength > 0
}

// Next returns the next arrival, or false past Duration. Arrivals are
// Poisson with a piecewise-constant rate (thinning against the higher rate).
func (tr *Trace) Next() (Arrival, bool) {
	peak := max(tr.s.BaseQPS, tr.s.BurstQPS)
	for {
		tr.t += time.Duration(tr.rng.ExpFloat64() / peak * float64(time.Second))
		if tr.t >= tr.s.Duration {
			return Arrival{}, false
		}
		if tr.rng.Float64()*peak <= tr.rate(tr.t) {
			break
		}
	}
	x := tr.rng.Float64() * tr.total
	ci := 0
	for i, c := range tr.s.Classes {
		if x < c.Weight {
			ci = i
			break
		}
		x -= c.Weight
		ci = i
	}
	c := tr.s.Classes[ci]
	return Arrival{At: tr.t, Class: ci, Prompt: c.Prompt.draw(tr.rng), Output: c.Output.draw(tr.rng),
		MaxToken: c.MaxTokens, TopP: tr.rng.Float64() < tr.s.TopPFraction}, true
}
