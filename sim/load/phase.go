package load

import (
	"math/rand/v2"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// Phase is one part of the load's repeating cycle.
type Phase struct {
	// Name is "steady", "burst" or "documents".
	Name string
	// Duration is the phase's length; QPS its Poisson arrival rate.
	Duration time.Duration
	QPS      float64
	// Mix is what arrives; TopPFraction the share of arrivals that sample
	// with top_p 0.9 (the sampler sorts the batch's logits);
	// PromptLogprobsFraction the share that ask for prompt_logprobs.
	Mix                    traffic.Mix
	TopPFraction           float64
	PromptLogprobsFraction float64
}

// documentsTopP is the share of the document burst's requests that ask for
// top_p: the replay's trace samples half of its requests with top-p.
const documentsTopP = 0.5

// Phases returns the cycle Run repeats, with the defaults filled in: steady,
// burst, and unless Documents < 0, steady again and the document burst. It
// fails like New on settings out of range (URL and Model are not needed).
func (s Settings) Phases() ([]Phase, error) {
	if s.URL == "" {
		s.URL = "-"
	}
	if s.Model == "" {
		s.Model = "-"
	}
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	return s.phases(), nil
}

func (s Settings) phases() []Phase {
	mix := s.mix()
	steady := Phase{Name: "steady", Duration: s.Steady, QPS: s.QPS, Mix: mix}
	burst := Phase{Name: "burst", Duration: s.Burst, QPS: s.QPS * s.BurstFactor, Mix: mix}
	if s.Documents < 0 {
		return []Phase{steady, burst}
	}
	docs := Phase{Name: "documents", Duration: s.Documents, QPS: s.DocumentQPS, Mix: traffic.Mix{longClass(1)}, TopPFraction: documentsTopP,
		PromptLogprobsFraction: s.DocumentPromptLogprobs}
	return []Phase{steady, burst, steady, docs}
}

// Arrival is one request of the load: when it arrives, in which phase, and
// what it asks for.
type Arrival struct {
	// At is the arrival time since the start of Run.
	At time.Duration
	// Phase indexes Phases; Class is "short" or "long".
	Phase int
	Class string
	// Prompt and MaxTokens are in tokens; Stream asks for SSE; TopP asks
	// for top_p 0.9; PromptLogprobs for prompt_logprobs.
	Prompt, MaxTokens            int
	Stream, TopP, PromptLogprobs bool
}

// Arrivals yields the load's arrivals in order, cycling through the phases
// without end: the sequence Run sends for the same Settings, drawn from the
// same seed, so a virtual-time test replays exactly the demo's traffic.
// Create one with Settings.Arrivals. Not safe for concurrent use.
type Arrivals struct {
	phases     []Phase
	rng        *rand.Rand
	i          int           // the current phase
	start, end time.Duration // the current phase's bounds
	t          time.Duration // the last arrival, or the phase's start
}

// Arrivals returns the arrivals of s (defaults filled in), or New's error
// for settings out of range (URL and Model are not needed).
func (s Settings) Arrivals() (*Arrivals, error) {
	phases, err := s.Phases()
	if err != nil {
		return nil, err
	}
	return newArrivals(phases, s.Seed), nil
}

func newArrivals(phases []Phase, seed uint64) *Arrivals {
	return &Arrivals{phases: phases, rng: rand.New(rand.NewPCG(seed, 0x6761746b)), end: phases[0].Duration}
}

// Next returns the next arrival. With no phase of positive rate and length
// it never returns; Settings cannot make such a cycle.
func (a *Arrivals) Next() Arrival {
	for {
		p := a.phases[a.i]
		gap := traffic.Gap(a.rng, p.QPS)
		if gap >= a.end-a.t { // past the phase: Poisson is memoryless, draw again in the next
			a.i = (a.i + 1) % len(a.phases)
			a.start, a.t = a.end, a.end
			a.end += a.phases[a.i].Duration
			continue
		}
		a.t += gap
		c := p.Mix[p.Mix.Pick(a.rng)]
		arr := Arrival{At: a.t, Phase: a.i, Class: c.Name, Prompt: c.Prompt.Draw(a.rng), MaxTokens: c.Output.Draw(a.rng), Stream: c.Stream}
		arr.TopP = p.TopPFraction > 0 && a.rng.Float64() < p.TopPFraction
		// Drawn only when asked for, so that a load without prompt_logprobs
		// keeps the arrivals it always had.
		arr.PromptLogprobs = p.PromptLogprobsFraction > 0 && a.rng.Float64() < p.PromptLogprobsFraction
		return arr
	}
}
