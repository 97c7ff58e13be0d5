package sim

import "time"

// OOM is the step that killed the engine: its shape, what the allocator
// held when the allocation failed, and the error.
type OOM struct {
	// At is the engine's virtual time of the failed step.
	At time.Duration
	// Running and Waiting are the sequences in the batch and in the
	// engine's own queue when the step was scheduled.
	Running, Waiting int
	// Tokens, Seqs and Samples are the step's computed tokens, its
	// sequences and those that sample a token (each holds vocabulary-wide
	// sampler buffers); TopP and Logprobs say whether one sampled with
	// top-p or asked for log-probabilities; PromptLogits is the most prompt
	// tokens a prompt_logprobs request computed logits for.
	Tokens, Seqs, Samples int
	TopP, Logprobs        bool
	PromptLogits          int
	// Alloc is the caching allocator when the allocation failed.
	Alloc AllocStats
	// Err is the allocator's out-of-memory error.
	Err error
}

// LastOOM returns the step that last killed the engine; false before the
// first OOM.
func (e *Engine) LastOOM() (OOM, bool) { return e.lastOOM, e.ooms > 0 }

// recordOOM keeps the failed step's shape and the allocator's state.
func (e *Engine) recordOOM(sh stepShape, err error) {
	e.lastOOM = OOM{At: e.now, Running: len(e.running), Waiting: e.waitingCount(),
		Tokens: sh.tokens, Seqs: sh.seqs, Samples: sh.samples, TopP: sh.topP, Logprobs: sh.logprobs,
		PromptLogits: sh.promptLogits, Alloc: e.alloc.Stats(), Err: err}
}
