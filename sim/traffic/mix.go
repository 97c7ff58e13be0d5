package traffic

import "math/rand/v2"

// Range is an inclusive range of token counts, drawn uniformly.
type Range struct{ Min, Max int }

// Draw returns a count in [Min, Max], taking one draw from rng.
func (r Range) Draw(rng *rand.Rand) int { return r.Min + rng.IntN(r.Max-r.Min+1) }

// Valid reports whether the range holds at least one count ≥ 1.
func (r Range) Valid() bool { return r.Min >= 1 && r.Max >= r.Min }

// Class is one kind of request in a mix: a short chat, a long document.
type Class struct {
	// Name labels the class ("short", "long").
	Name string
	// Weight is the class's share of arrivals, relative to the others; > 0.
	Weight float64
	// Prompt is the prompt length in tokens. Output is the tokens generated
	// (the replay's engine runs exactly that many); a client over HTTP sends
	// its draw as max_tokens, since a client caps an answer, it cannot choose it.
	Prompt, Output Range
	// MaxTokens is the max_tokens a replayed request declares (≥ Output.Max).
	MaxTokens int
	// Stream asks an HTTP generator to request the answer as an SSE stream.
	// The replay ignores it.
	Stream bool
	// PromptLogprobs makes every request of the class ask for
	// prompt_logprobs (scoring and evaluation jobs: lm-eval-harness's
	// loglikelihood requests, echo with logprobs).
	PromptLogprobs bool
}

// Valid reports whether the class can be drawn: weight > 0, ranges ≥ 1,
// MaxTokens ≥ Output.Max.
func (c Class) Valid() bool {
	return c.Weight > 0 && c.Prompt.Valid() && c.Output.Valid() && c.MaxTokens >= c.Output.Max
}

// Mix is a request mix: classes drawn in proportion to their weights.
type Mix []Class

// Pick returns the index of a class drawn by weight, taking one Float64 from
// rng. An empty mix returns 0.
func (m Mix) Pick(rng *rand.Rand) int {
	total := 0.0
	for _, c := range m {
		total += c.Weight
	}
	x := rng.Float64() * total
	ci := 0
	for i, c := range m {
		if x < c.Weight {
			return i
		}
		x -= c.Weight
		ci = i // rounding can leave x ≥ the last weight: that is the last class
	}
	return ci
}
