package sim

import "time"

// Request is what a client asks of the engine.
type Request struct {
	// PromptTokens is the prompt length in tokens (≥ 1).
	PromptTokens int
	// MaxTokens is the output budget (≥ 1); it reserves context length.
	MaxTokens int
	// OutputTokens is how many tokens the request really generates before it
	// stops (EOS); 0 or more than MaxTokens means MaxTokens.
	OutputTokens int
	// TopP marks a request that samples with top-p/top-k: the sampler sorts
	// the logits of the batch (values float32 + indices int64).
	TopP bool
	// Logprobs marks a request that asks for log-probabilities: the sampler
	// keeps a float32 log-softmax copy of the logits.
	Logprobs bool
	// PromptLogprobs marks a request that asks for prompt_logprobs: every
	// step that computes part of its prompt also computes the LM head's
	// logits and their float32 log-softmax over those prompt tokens.
	PromptLogprobs bool
	// BlockHashes is the prompt's content identity for automatic prefix
	// caching: the chained hash (ChainHash) of each of its leading full
	// blocks of the engine's BlockSize tokens, at most PromptTokens ÷
	// BlockSize of them. A request reuses the cached blocks of its longest
	// run of leading hashes another request computed. Nil: the prompt shares
	// nothing (it is neither looked up nor cached).
	BlockHashes []uint64
}

// SeqState is where a request is in the engine.
type SeqState int

// The states of a Seq.
const (
	SeqWaiting SeqState = iota
	SeqRunning
	SeqFinished
	SeqFailed
	SeqAborted
)

// String returns the state's name.
func (s SeqState) String() string {
	switch s {
	case SeqWaiting:
		return "waiting"
	case SeqRunning:
		return "running"
	case SeqFinished:
		return "finished"
	case SeqFailed:
		return "failed"
	case SeqAborted:
		return "aborted"
	}
	return "unknown"
}

// Seq is one request inside the engine. Its getters may be read only under
// whatever serialises the Engine's calls.
type Seq struct {
	// What every step reads comes first, in the object's first 64 bytes:
	// the scheduler walks every running request each step (issue 15 step 6).
	req        Request
	computed   int  // tokens whose KV is in the cache
	generated  int  // output tokens sampled so far
	blocks     int  // KV blocks held
	counted    bool // prompt tokens added to the counter
	state      SeqState
	id         uint64
	err        error
	arrival    time.Duration
	firstToken time.Duration
	finishedAt time.Duration
	preempted  int
	cached     int // leading blocks held as refs on prefix-cache blocks
	// scheduledAt is when the step that first scheduled its tokens began.
	scheduledAt time.Duration
}

// ID is unique within an engine, counting from 1.
func (s *Seq) ID() uint64 { return s.id }

// Request returns what was submitted (OutputTokens filled in).
func (s *Seq) Request() Request { return s.req }

// State returns where the request is.
func (s *Seq) State() SeqState { return s.state }

// Err returns why a failed or aborted request ended, else nil.
func (s *Seq) Err() error { return s.err }

// Generated is the number of output tokens produced so far.
func (s *Seq) Generated() int { return s.generated }

// Done reports whether the request has ended one way or another.
func (s *Seq) Done() bool { return s.state >= SeqFinished }

// Arrival, FirstTokenAt and FinishedAt are virtual times since the engine's
// start; FirstTokenAt is 0 before the first token.
func (s *Seq) Arrival() time.Duration { return s.arrival }

// FirstTokenAt is the virtual time of the first output token (0 before it).
func (s *Seq) FirstTokenAt() time.Duration { return s.firstToken }

// ScheduledAt is the virtual time the step that first scheduled any of its
// tokens began: it waited in the engine's queue from Arrival until then (0
// before it; a preempted request keeps its first).
func (s *Seq) ScheduledAt() time.Duration { return s.scheduledAt }

// FinishedAt is the virtual time the request ended (0 before it).
func (s *Seq) FinishedAt() time.Duration { return s.finishedAt }

// Preemptions is how many times the request was preempted and recomputed.
func (s *Seq) Preemptions() int { return s.preempted }

// pending is how many tokens must be computed before the next sample.
func (s *Seq) pending() int { return s.req.PromptTokens + s.generated - s.computed }

// deque is a FIFO that also takes preempted requests back at the front.
type deque struct {
	buf        []*Seq
	head, size int
}

func (d *deque) len() int { return d.size }

func (d *deque) grow() {
	n := max(16, 2*len(d.buf))
	nb := make([]*Seq, n)
	for i := range d.size {
		nb[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = nb, 0
}

func (d *deque) pushBack(s *Seq) {
	if d.size == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.size)%len(d.buf)] = s
	d.size++
}

func (d *deque) pushFront(s *Seq) {
	if d.size == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = s
	d.size++
}

func (d *deque) front() *Seq { return d.buf[d.head] }

func (d *deque) popFront() *Seq {
	s := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.size--
	return s
}
