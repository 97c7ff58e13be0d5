package sim

import "time"

// scheduled is one sequence's share of a step.
type scheduled struct {
	s      *Seq
	tokens int
}

// stepScratch is reused across steps to keep the hot loop free of allocations.
type stepScratch struct {
	batch []scheduled
	run   stepRun
	fresh []*Seq
	// memo of the last step's buffers: replaying the same shape on the same
	// allocator state (nothing allocated, freed or flushed since, and the
	// step took no new segment) ends in the same state, so it is skipped.
	lastShape   stepShape
	lastVersion uint64
	lastClean   bool
	skipped     int64
	noMemo      bool // tests: replay every step
}

func (e *Engine) blocksFor(tokens int) int { return (tokens + e.s.BlockSize - 1) / e.s.BlockSize }

// runStep schedules and runs one step; false when there is nothing to run.
func (e *Engine) runStep() bool {
	batch := e.schedule()
	if len(batch) == 0 {
		return false
	}
	sh, dur := e.shape(batch)
	if err := e.allocate(sh); err != nil {
		e.die(err)
		return true
	}
	e.steps++
	e.now += dur
	e.commit(batch)
	return true
}

// schedule builds a step like vLLM V1's scheduler: running requests first
// (decodes and unfinished prefill chunks, in arrival order), preempting the
// most recent running request when KV blocks run out; then, if nothing was
// preempted, waiting requests while the token budget, max_num_seqs and the
// KV cache allow.
func (e *Engine) schedule() []scheduled {
	budget := e.s.MaxNumBatchedTokens
	batch := e.step.batch[:0]
	e.step.fresh = e.step.fresh[:0]
	preempted := e.c.Preemptions
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(s.pending(), budget)
		need := 0
		if s.computed+n > s.blocks*e.s.BlockSize { // most decodes fit the last block
			need = e.blocksFor(s.computed+n) - s.blocks
		}
		for need > e.freeBlocks && len(e.running) > i+1 {
			e.preempt(e.running[len(e.running)-1])
		}
		if need > e.freeBlocks {
			e.preempt(s) // s itself is the newest: it waits for room
			break
		}
		e.freeBlocks -= need
		s.blocks += need
		batch = append(batch, scheduled{s, n})
		budget -= n
	}
	// Like V1, a step that preempted admits no waiting request.
	for budget > 0 && len(e.running) < e.s.MaxNumSeqs && e.waiting.len() > 0 && e.c.Preemptions == preempted {
		s := e.waiting.front()
		if s.state != SeqWaiting {
			e.waiting.popFront() // aborted while queued
			continue
		}
		n := min(s.pending(), budget)
		need := e.blocksFor(n)
		if need > e.freeBlocks {
			break
		}
		e.waiting.popFront()
		e.freeBlocks -= need
		s.blocks = need
		s.state = SeqRunning
		e.running = append(e.running, s)
		e.step.fresh = append(e.step.fresh, s)
		batch = append(batch, scheduled{s, n})
		budget -= n
	}
	e.step.batch = batch
	return batch
}

// preempt sends a running request back to the head of the queue; its KV
// blocks and tensors are freed and it will be recomputed (vLLM's RECOMPUTE).
func (e *Engine) preempt(s *Seq) {
	e.release(s)
	e.removeRunning(s)
	s.computed = 0
	s.state = SeqWaiting
	s.preempted++
	e.c.Preemptions++
	e.waiting.pushFront(s)
}

// release frees a request's KV blocks and per-request tensor.
func (e *Engine) release(s *Seq) {
	e.freeBlocks += s.blocks
	s.blocks = 0
	if s.buf.Valid() {
		_ = e.alloc.Free(s.buf) // s.buf is live: set when allocated, cleared here
		s.buf = Buffer{}
	}
}

func (e *Engine) removeRunning(s *Seq) {
	for i, r := range e.running {
		if r == s {
			e.running = append(e.running[:i], e.running[i+1:]...)
			return
		}
	}
}

// shape sizes the step's buffers and its duration from the roofline: the
// step reads all weights plus the KV context of every sequence at the memory
// bandwidth, and computes 2 × params FLOPs per token at PrefillEfficiency of
// peak; it takes the longer of the two.
func (e *Engine) shape(batch []scheduled) (stepShape, time.Duration) {
	var sh stepShape
	var kvTokens int64
	maxCtx := 0
	for _, b := range batch {
		s := b.s
		sh.tokens += b.tokens
		sh.seqs++
		ctx := s.computed + b.tokens
		kvTokens += int64(ctx)
		maxCtx = max(maxCtx, ctx)
		if b.tokens == s.pending() {
			sh.samples++
			sh.sort = sh.sort || s.req.TopP
			sh.logprobs = sh.logprobs || s.req.Logprobs
		}
	}
	sh.maxBlocks = e.blocksFor(maxCtx)
	sh.eagerIn = e.s.CUDAGraphMaxTokens == 0
	sh.graphed = sh.tokens <= e.s.CUDAGraphMaxTokens
	m := e.s.Model
	bytes := float64(e.plan.WeightBytes) + float64(kvTokens)*float64(e.plan.KVBytesPerToken)
	memT := bytes / e.s.GPU.BandwidthBytesPerSec
	compT := 2 * float64(m.Params) * float64(sh.tokens) / (e.s.GPU.PeakFLOPS * e.s.PrefillEfficiency)
	return sh, time.Duration(max(memT, compT) * float64(time.Second))
}

// allocate makes the step's allocations: new requests' tensors, then the
// step's buffers. Any failure is an out-of-memory error.
func (e *Engine) allocate(sh stepShape) error {
	for _, s := range e.step.fresh {
		b, err := e.alloc.Alloc(seqTensorBytes(s.req))
		if err != nil {
			return err
		}
		s.buf = b
	}
	st := &e.step
	if !st.noMemo && st.lastClean && sh == st.lastShape && e.alloc.version == st.lastVersion {
		st.skipped++
		return nil
	}
	before := e.alloc.Stats()
	r := &st.run
	r.a, r.err = e.alloc, nil
	stepBuffers(r, e.s.Model, sh)
	after := e.alloc.Stats()
	st.lastShape, st.lastVersion = sh, e.alloc.version
	st.lastClean = r.err == nil && after.ReservedBytes == before.ReservedBytes && after.NumAllocRetries == before.NumAllocRetries
	return r.err
}

// commit applies a finished step: KV grows by the computed tokens, sequences
// that completed their pending tokens sample one, and finished requests leave.
func (e *Engine) commit(batch []scheduled) {
	done := false
	for _, b := range batch {
		s := b.s
		sample := b.tokens == s.pending()
		s.computed += b.tokens
		if !sample {
			continue
		}
		if !s.counted {
			s.counted = true
			e.c.PromptTokens += int64(s.req.PromptTokens)
		}
		s.generated++
		e.c.GenerationTokens++
		if s.generated == 1 {
			s.firstToken = e.now
		}
		if s.generated >= s.req.OutputTokens {
			s.state = SeqFinished
			s.finishedAt = e.now
			e.release(s)
			e.c.RequestSuccess++
			e.finished = append(e.finished, s)
			done = true
		}
	}
	if done {
		kept := e.running[:0]
		for _, s := range e.running {
			if s.state == SeqRunning {
				kept = append(kept, s)
			}
		}
		clear(e.running[len(kept):])
		e.running = kept
	}
}
