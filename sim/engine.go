package sim

import (
	"errors"
	"fmt"
	"time"
)

// Errors a request can end with, or Submit can return.
var (
	// ErrEngineDead fails every request in flight when the engine hits an
	// out-of-memory error (it wraps the allocator's ErrOutOfMemory message).
	ErrEngineDead = errors.New("sim: engine died")
	// ErrUnavailable is returned by Submit while the engine restarts.
	ErrUnavailable = errors.New("sim: engine is restarting")
	// ErrTooLong is returned by Submit when prompt + max tokens exceed the context length.
	ErrTooLong = errors.New("sim: request exceeds the model's context length")
	// ErrAborted ends a request the caller aborted.
	ErrAborted = errors.New("sim: request aborted")
)

// Engine is a simulated vLLM engine on one GPU, in virtual time: requests are
// submitted, time moves only through Advance, and the engine runs continuous
// batching steps whose length comes from a roofline. Activation buffers and
// per-request tensors go through a caching Allocator; an allocation that fails
// kills the engine until RestartTime has passed. Create one with New. Not safe
// for concurrent use (the server wraps it in a mutex); it must not be copied.
// Deterministic: the same calls produce the same results.
type Engine struct {
	s    Settings
	plan MemoryPlan

	now       time.Duration // virtual time since New
	until     time.Duration // the last Advance's target: a step runs there when now > until
	alloc     *Allocator
	dead      bool
	restartAt time.Duration
	lastErr   error
	lastOOM   OOM

	running    []*Seq
	waiting    deque
	freeBlocks int
	nextID     uint64
	finished   []*Seq
	step       stepScratch
	pc         prefixCache // automatic prefix caching's cached blocks

	// counters of the current process (reset on restart, like vLLM's)
	c Counters
	// lifetime counters across restarts
	ooms, restarts, steps int64
	// failedBoots counts restarts vLLM refused: too little free memory.
	failedBoots int64
	nb          *neighbor // the other process on the GPU, if any
}

// New builds an engine: it profiles the activation peak, sizes the KV cache
// and allocates weights and KV cache through a fresh allocator, as vLLM does
// at start-up. It fails when the settings leave no room for a KV cache.
func New(s Settings) (*Engine, error) {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return nil, err
	}
	plan, err := planMemory(s)
	if err != nil {
		return nil, err
	}
	e := &Engine{s: s, plan: plan}
	if n := s.Neighbor; n.Base > 0 || len(n.Peaks) > 0 {
		e.nb = newNeighbor(n)
	}
	if err := e.boot(); err != nil {
		return nil, err
	}
	return e, nil
}

// Settings returns the settings with defaults filled in.
func (e *Engine) Settings() Settings { return e.s }

// Plan returns the memory plan computed at start-up.
func (e *Engine) Plan() MemoryPlan { return e.plan }

// Now returns the engine's virtual time since New.
func (e *Engine) Now() time.Duration { return e.now }

// Alive reports whether the engine serves (false while it restarts after an OOM).
func (e *Engine) Alive() bool { return !e.dead }

// LastError returns the error that last killed the engine, or nil.
func (e *Engine) LastError() error { return e.lastErr }

// boot starts a fresh process as vLLM does: the runner's persistent
// buffers, the weights and the KV cache allocated through a fresh
// allocator (the plan was made once: the same settings give the same one),
// then the warm-up runs — the compiled sizes' forward passes and the
// sampler for the largest batch, which vLLM runs after capturing the CUDA
// graphs "to avoid memory fragmentation" and whose blocks stay cached.
func (e *Engine) boot() error {
	a, err := NewAllocator(AllocSettings{
		DeviceBytes:        e.s.deviceBytes() - e.s.OtherProcessBytes - e.s.Neighbor.Base - e.nbHeld(),
		MaxSplitSize:       e.s.MaxSplitSize,
		ExpandableSegments: e.s.ExpandableSegments,
	})
	if err != nil {
		return err
	}
	for _, n := range e.plan.staticTensors(e.s) {
		if _, err := a.Alloc(n); err != nil {
			return fmt.Errorf("sim: loading weights and KV cache: %w", err)
		}
	}
	warm := profileShape(e.s)
	warm.warmup = true
	r := stepRun{a: a}
	stepBuffers(&r, e.s, warm)
	r.exec(nil)
	if r.err != nil {
		return fmt.Errorf("sim: warming up: %w", r.err)
	}
	e.alloc = a
	e.step.lastClean = false // a new allocator: the memo does not carry over
	e.step.memo = nil
	e.dead = false
	e.freeBlocks = e.plan.NumGPUBlocks
	e.c = Counters{}
	e.pc.reset() // a new process: its prefix cache starts empty
	return nil
}

// canBoot reports whether vLLM would start now: the device's free memory
// at its first snapshot must be at least gpu_memory_utilization of the
// total, and its allocator must fit the weights and the KV cache.
func (e *Engine) canBoot() bool {
	free := e.s.GPU.MemoryBytes - e.s.CUDAContextBytes - e.s.OtherProcessBytes - e.s.Neighbor.Base - e.nbHeld()
	return free >= int64(float64(e.s.GPU.MemoryBytes)*e.s.GPUMemoryUtilization)
}

// Submit queues a request at the engine's current time. It fails with
// ErrUnavailable while the engine restarts and ErrTooLong when the request
// cannot fit the context length or the KV cache.
func (e *Engine) Submit(r Request) (*Seq, error) {
	if e.dead {
		return nil, ErrUnavailable
	}
	if r.PromptTokens < 1 || r.MaxTokens < 1 {
		return nil, fmt.Errorf("sim: request with %d prompt and %d max tokens, want >= 1 each", r.PromptTokens, r.MaxTokens)
	}
	total := r.PromptTokens + r.MaxTokens
	if total > e.s.MaxModelLen || e.blocksFor(total) > e.plan.NumGPUBlocks {
		return nil, fmt.Errorf("%w: %d prompt + %d output tokens > %d", ErrTooLong, r.PromptTokens, r.MaxTokens, e.s.MaxModelLen)
	}
	if full := r.PromptTokens / e.s.BlockSize; len(r.BlockHashes) > full {
		return nil, fmt.Errorf("sim: %d block hashes for a prompt of %d full blocks", len(r.BlockHashes), full)
	}
	if r.OutputTokens <= 0 || r.OutputTokens > r.MaxTokens {
		r.OutputTokens = r.MaxTokens
	}
	e.nextID++
	s := &Seq{id: e.nextID, req: r, arrival: e.now, state: SeqWaiting}
	e.waiting.pushBack(s)
	return s, nil
}

// Abort ends a request the client gave up on: it leaves the queue or the
// batch at once and frees its KV blocks, like vLLM on a disconnect.
func (e *Engine) Abort(s *Seq) {
	switch s.state {
	case SeqWaiting:
		s.state = SeqAborted // skipped when it reaches the head of the queue
	case SeqRunning:
		e.release(s)
		e.removeRunning(s)
		s.state = SeqAborted
	default:
		return
	}
	s.err = ErrAborted
	s.finishedAt = e.now
	e.finished = append(e.finished, s)
}

// EmptyCache flushes the allocator's wholly free cached segments back to the
// device (torch.cuda.empty_cache()) and returns the bytes released; 0 while
// the engine is dead.
func (e *Engine) EmptyCache() int64 {
	if e.dead {
		return 0
	}
	return e.alloc.EmptyCache()
}

// TakeFinished returns the requests that ended (completed, failed or
// aborted) since the last call, in the order they ended.
func (e *Engine) TakeFinished() []*Seq {
	f := e.finished
	e.finished = nil
	return f
}

// Advance runs the engine until virtual time to: steps while there is work,
// idles otherwise, restarts after an OOM once RestartTime has passed. A step
// that starts before to may end after it; Now then reads past to.
func (e *Engine) Advance(to time.Duration) {
	e.until = to
	for {
		if e.dead {
			if to < e.restartAt {
				e.neighborTo(to)
				e.now = max(e.now, to)
				return
			}
			e.now = max(e.now, e.restartAt)
			e.neighborTo(e.now)
			if !e.canBoot() || e.boot() != nil {
				// vLLM refuses to start (free memory below its share, or
				// the weights and KV cache do not fit): the pod is
				// restarted again after the same time.
				e.failedBoots++
				e.restartAt = e.now + e.s.RestartTime
				continue
			}
			e.restarts++
		}
		e.neighborTo(e.now)
		if e.now >= to {
			return
		}
		if !e.runStep() {
			e.neighborTo(to)
			e.now = to
			return
		}
	}
}

// die kills the engine: every request in flight or queued fails.
func (e *Engine) die(err error) {
	e.dead = true
	e.ooms++
	e.lastErr = err
	e.restartAt = e.now + e.s.RestartTime
	fail := func(s *Seq) {
		s.state = SeqFailed
		s.err = fmt.Errorf("%w: %w", ErrEngineDead, err)
		s.finishedAt = e.now
		e.finished = append(e.finished, s)
	}
	for _, s := range e.running {
		fail(s)
	}
	for e.waiting.len() > 0 {
		if s := e.waiting.popFront(); s.state == SeqWaiting {
			fail(s)
		}
	}
	e.running = e.running[:0]
	e.alloc = nil
}
