package sim

import "time"

// scheduled is one sequence's share of a step. The batch is a prefix of
// e.running in the same order (schedule takes the running requests in order
// and admits waiting ones only when every running one is in the batch), so
// batch[i] is e.running[i]'s share and holds no pointer to write.
type scheduled struct {
	tokens int
	sample bool // the step computes the sequence's pending tokens and samples one
}

// stepScratch is reused across steps to keep the hot loop free of allocations.
type stepScratch struct {
	batch []scheduled
	run   stepRun
	// the step's shape, accumulated while the batch is built (schedule reads
	// every sequence once; shape finishes the figures)
	shape    stepShape
	kvTokens int64
	maxCtx   int
	// memo of the last step's buffers: replaying the same shape on the same
	// allocator state (nothing allocated, freed or flushed since, and the
	// step took no new segment) ends in the same state, so it is skipped.
	lastShape   stepShape
	lastVersion uint64
	lastClean   bool
	// mid is the allocator's state in the middle of the last step that
	// replayed its buffers (a skipped step's is the same); midValid says
	// that step ran them all.
	mid      AllocStats
	midValid bool
	skipped  int64
	// memo holds, for steps that left the large pool as they found it, the
	// block sizes their large calls took (execStep).
	memo     map[stepKey][]int64
	memoHits int64
	noMemo   bool // tests: replay every step
}

func (e *Engine) blocksFor(tokens int) int { return (tokens + e.s.BlockSize - 1) / e.s.BlockSize }

// runStep schedules and runs one step; false when there is nothing to run.
func (e *Engine) runStep() bool {
	batch := e.schedule()
	if len(batch) == 0 {
		return false
	}
	sh, dur := e.shape()
	if err := e.allocate(sh); err != nil {
		e.recordOOM(sh, err)
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
	st := &e.step
	st.shape, st.kvTokens, st.maxCtx = stepShape{}, 0, 0
	preempted := e.c.Preemptions
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		p := s.pending()
		n := min(p, budget)
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
		e.takeBlocks(need)
		s.blocks += need
		batch = append(batch, scheduled{n, n == p})
		st.add(s, n, n == p)
		budget -= n
	}
	// Like V1, a step that preempted admits no waiting request.
	for budget > 0 && len(e.running) < e.s.MaxNumSeqs && e.waiting.len() > 0 && e.c.Preemptions == preempted {
		s := e.waiting.front()
		if s.state != SeqWaiting {
			e.waiting.popFront() // aborted while queued
			continue
		}
		// Automatic prefix caching: the longest run of leading blocks
		// already cached is reused and only the rest is prefilled
		// (get_computed_blocks, allocate_slots); the cached blocks nobody
		// holds leave the free queue too.
		hit, hitFree := e.hitBlocks(s)
		p := s.pending() - hit*e.s.BlockSize
		n := min(p, budget)
		need := e.blocksFor(hit*e.s.BlockSize+n) - hit
		if need+hitFree > e.freeBlocks {
			break
		}
		e.waiting.popFront()
		e.takeHits(s, hit)
		e.takeBlocks(need)
		s.blocks += need
		s.state = SeqRunning
		if s.scheduledAt == 0 {
			s.scheduledAt = e.now
		}
		e.running = append(e.running, s)
		batch = append(batch, scheduled{n, n == p})
		st.add(s, n, n == p)
		budget -= n
	}
	st.batch = batch
	return batch
}

// add counts a scheduled sequence into the step's shape. s.computed is
// read before the step: the context after it is computed + tokens.
func (st *stepScratch) add(s *Seq, tokens int, sample bool) {
	sh := &st.shape
	sh.tokens += tokens
	sh.seqs++
	ctx := s.computed + tokens
	st.kvTokens += int64(ctx)
	st.maxCtx = max(st.maxCtx, ctx)
	if s.req.PromptLogprobs && s.computed < s.req.PromptTokens {
		sh.promptLogits = max(sh.promptLogits, min(ctx, s.req.PromptTokens)-s.computed)
	}
	if sample {
		sh.samples++
		sh.topP = sh.topP || s.req.TopP
		sh.logprobs = sh.logprobs || s.req.Logprobs
	}
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

// release frees a request's KV blocks; its cached prompt blocks stay
// cached in the free queue.
func (e *Engine) release(s *Seq) {
	e.freeBlocks += s.blocks - s.cached
	if s.cached > 0 {
		e.releaseCached(s)
	}
	s.blocks = 0
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
// peak; it takes the longer of the two (per GPU: ÷ TensorParallel), plus,
// with tensor parallelism, two ring all-reduces of the step's hidden states
// per layer over the GPU link. It finishes the figures schedule accumulated
// for the batch it returned.
func (e *Engine) shape() (stepShape, time.Duration) {
	sh, kvTokens := e.step.shape, e.step.kvTokens
	sh.maxBlocks = e.blocksFor(e.step.maxCtx)
	sh.graphed = sh.tokens <= e.s.CUDAGraphMaxTokens // 0 with EnforceEager
	m := e.s.Model
	bytes := float64(e.plan.WeightBytes) + float64(kvTokens)*float64(e.plan.KVBytesPerToken)
	memT := bytes / e.s.GPU.BandwidthBytesPerSec
	tp := float64(e.s.TensorParallel)
	compT := 2 * float64(m.Params) / tp * float64(sh.tokens) / (e.s.GPU.PeakFLOPS * e.s.PrefillEfficiency)
	var commT float64
	if tp > 1 {
		perReduce := float64(sh.tokens) * float64(m.Hidden) * float64(m.DtypeBytes) * 2 * (tp - 1) / tp
		commT = 2 * float64(m.Layers) * perReduce / e.s.GPU.LinkBytesPerSec
	}
	return sh, time.Duration((max(memT, compT) + commT) * float64(time.Second))
}

// allocate makes the step's allocations. Any failure is an out-of-memory
// error. A request holds no GPU tensor of its own between steps: vLLM V1
// keeps its token ids on the CPU and its step inputs in the runner's
// persistent buffers.
func (e *Engine) allocate(sh stepShape) error {
	st := &e.step
	if !st.noMemo && st.lastClean && sh == st.lastShape && e.alloc.version == st.lastVersion {
		st.skipped++
		return nil
	}
	a := e.alloc
	reserved, retries := a.reserved, a.retries
	r := &st.run
	r.a, r.mid = a, nil
	if e.s.MidStepReadings {
		r.mid = &st.mid
	}
	r.reset()
	stepBuffers(r, e.s, sh)
	e.execStep(r)
	st.midValid = r.err == nil
	st.lastShape, st.lastVersion = sh, a.version
	st.lastClean = r.err == nil && a.reserved == reserved && a.retries == retries
	return r.err
}

// execStep runs a step's recorded buffers. A step whose large-pool calls
// already ran on the same large-pool state and left it unchanged (most
// steps on a warm cache) only counts their bytes, and its small calls run
// for real; the result is the same. It runs in full when readings are taken
// mid-step (the memo keeps no mid-step state), with expandable segments,
// and when the device has too little room left for every small call to take
// a new segment (a flush there could release what the step's large buffers
// would hold).
func (e *Engine) execStep(r *stepRun) {
	st, a := &e.step, e.alloc
	if st.noMemo || e.s.MidStepReadings || e.s.ExpandableSegments {
		r.exec(nil)
		return
	}
	trace, smallGets := r.largeTrace()
	key := stepKey{state: a.largeHash, trace: trace}
	if sizes, ok := st.memo[key]; ok && a.s.DeviceBytes-a.reserved >= int64(smallGets)*smallBuffer {
		st.memoHits++
		r.exec(sizes)
		return
	}
	before, retries := a.largeHash, a.retries
	r.exec(nil)
	if r.err != nil || a.largeHash != before || a.retries != retries {
		return
	}
	if st.memo == nil || len(st.memo) >= maxStepMemo {
		st.memo = make(map[stepKey][]int64)
	}
	st.memo[key] = append([]int64(nil), r.sizes...)
}

// stepKey names a step's large-pool calls on a large-pool state.
type stepKey struct{ state, trace uint64 }

// maxStepMemo bounds the steps remembered (each a few dozen bytes); the
// memo starts afresh when full.
const maxStepMemo = 1 << 16

// commit applies a finished step: KV grows by the computed tokens, sequences
// that completed their pending tokens sample one, and finished requests leave
// e.running in the same pass (batch[i] is e.running[i]'s share).
func (e *Engine) commit(batch []scheduled) {
	w := 0 // e.running[:w] are the batch's requests still running
	for i, b := range batch {
		s := e.running[i]
		s.computed += b.tokens
		if s.cached < len(s.req.BlockHashes) {
			e.cacheFull(s)
		}
		if b.sample && e.sample(s) {
			continue
		}
		if w != i {
			e.running[w] = s
		}
		w++
	}
	if w < len(batch) {
		n := copy(e.running[w:], e.running[len(batch):])
		clear(e.running[w+n:])
		e.running = e.running[:w+n]
	}
}

// sample gives s the token its step computed and reports whether s finished.
func (e *Engine) sample(s *Seq) bool {
	if !s.counted {
		s.counted = true
		e.c.PromptTokens += int64(s.req.PromptTokens)
	}
	s.generated++
	e.c.GenerationTokens++
	if s.generated == 1 {
		s.firstToken = e.now
	}
	if s.generated < s.req.OutputTokens {
		return false
	}
	s.state = SeqFinished
	s.finishedAt = e.now
	e.release(s)
	e.c.RequestSuccess++
	e.finished = append(e.finished, s)
	return true
}
