package replay

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"time"
)

// ConversationSettings shape the multi-turn scenario's traffic: users open
// conversations at Rate; each conversation starts with one of SystemPrompts
// shared system prompts and the user's own context (a document, earlier
// chats), then runs Turns turns; each turn sends the whole history so far
// (system prompt, context, every earlier question and answer) and a new
// question, and the next turn follows Think later (an open loop: the trace
// fixes when each turn is sent, as a recorded trace does).
// sim/replay/README.md ("Routing") says where each default comes from.
type ConversationSettings struct {
	// Rate is the conversations opened per second. 0 turns the
	// conversation trace off (the synthetic trace of TraceSettings runs).
	Rate float64
	// SystemPrompts is how many distinct system prompts the conversations
	// share, each drawn uniformly. 0 means 8.
	SystemPrompts int
	// System, Context, Question and Answer are token counts: a system
	// prompt's, the user's context's (Min 0 allowed: none), a question's
	// and an answer's (the request's output).
	System, Context, Question, Answer Range
	// Turns is how many turns a conversation has.
	Turns Range
	// Think is the time from one turn's arrival to the next's, drawn
	// uniformly in [ThinkMin, ThinkMax].
	ThinkMin, ThinkMax time.Duration
	// MaxTokens is every turn's max_tokens. 0 means 256.
	MaxTokens int
}

// DefaultConversations is the multi-turn scenario's shape at rate 1.
func DefaultConversations() ConversationSettings {
	return ConversationSettings{Rate: 1, SystemPrompts: 8, System: Range{Min: 800, Max: 1200},
		Context: Range{Min: 0, Max: 4000}, Question: Range{Min: 50, Max: 250}, Answer: Range{Min: 50, Max: 150},
		Turns: Range{Min: 1, Max: 9}, ThinkMin: 10 * time.Second, ThinkMax: 30 * time.Second, MaxTokens: 256}
}

func (s ConversationSettings) validate() error {
	switch {
	case !(s.Rate > 0), s.SystemPrompts < 0, s.MaxTokens < 0:
		return fmt.Errorf("replay: ConversationSettings: Rate > 0, SystemPrompts and MaxTokens ≥ 0, got %+v", s)
	case !s.System.Valid(), !s.Question.Valid(), !s.Answer.Valid(), !s.Turns.Valid(),
		s.Context.Min < 0 || s.Context.Max < s.Context.Min:
		return fmt.Errorf("replay: ConversationSettings: token and turn ranges must be ≥ 1 (context ≥ 0), got %+v", s)
	case s.ThinkMin < 0 || s.ThinkMax < s.ThinkMin:
		return fmt.Errorf("replay: ConversationSettings: 0 ≤ ThinkMin ≤ ThinkMax, got %v and %v", s.ThinkMin, s.ThinkMax)
	case s.MaxTokens > 0 && s.MaxTokens < s.Answer.Max:
		return fmt.Errorf("replay: ConversationSettings: MaxTokens %d below Answer.Max %d", s.MaxTokens, s.Answer.Max)
	}
	return nil
}

// conversation is one conversation's next turn.
type conversation struct {
	at          time.Duration
	id          uint64
	turn, turns int
	history     []Segment // what every later turn re-sends
}

// convHeap orders conversations by their next turn's time, then by id.
type convHeap []*conversation

func (h convHeap) Len() int { return len(h) }
func (h convHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].id < h[j].id
}
func (h convHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *convHeap) Push(x any)   { *h = append(*h, x.(*conversation)) }
func (h *convHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// ConversationTrace yields the turns of ConversationSettings' conversations
// in time order, every turn's prompt given as segments (Arrival.Content).
// It has one class, "chat". Create one with NewConversationTrace. Not safe
// for concurrent use.
type ConversationTrace struct {
	s        ConversationSettings
	duration time.Duration
	rng      *rand.Rand
	open     time.Duration // when the next conversation opens
	next     uint64        // the next conversation's id
	pending  convHeap
}

// NewConversationTrace returns the conversations of s for duration (0: 24
// h) drawn from seed; the same arguments give the same turns.
func NewConversationTrace(s ConversationSettings, duration time.Duration, seed uint64) (*ConversationTrace, error) {
	if s.SystemPrompts == 0 {
		s.SystemPrompts = 8
	}
	if s.MaxTokens == 0 {
		s.MaxTokens = 256
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	if duration <= 0 {
		duration = 24 * time.Hour
	}
	ct := &ConversationTrace{s: s, duration: duration, rng: rand.New(rand.NewPCG(seed, 0xc0417e))}
	ct.open = ct.gap()
	return ct, nil
}

// gap is the time to the next conversation (Poisson at Rate).
func (ct *ConversationTrace) gap() time.Duration {
	return time.Duration(ct.rng.ExpFloat64() / ct.s.Rate * float64(time.Second))
}

// Classes names the trace's one class.
func (ct *ConversationTrace) Classes() []string { return []string{"chat"} }

// Err returns nil: a synthetic trace cannot fail.
func (ct *ConversationTrace) Err() error { return nil }

// Next returns the next turn, or false past the duration.
func (ct *ConversationTrace) Next() (Arrival, bool) {
	if len(ct.pending) == 0 || ct.open < ct.pending[0].at {
		if ct.open >= ct.duration {
			return Arrival{}, false
		}
		ct.start()
	}
	c := heap.Pop(&ct.pending).(*conversation)
	if c.at >= ct.duration {
		return Arrival{}, false // every later turn and opening is later still
	}
	return ct.turn(c), true
}

// start opens a conversation: its system prompt and the user's context.
func (ct *ConversationTrace) start() {
	s := ct.s
	c := &conversation{at: ct.open, id: ct.next, turns: s.Turns.Draw(ct.rng)}
	ct.next++
	k := ct.rng.IntN(s.SystemPrompts)
	c.history = []Segment{{ID: uint64(k + 1), Tokens: systemTokens(s.System, k)}}
	if n := s.Context.Min + ct.rng.IntN(s.Context.Max-s.Context.Min+1); n > 0 {
		c.history = append(c.history, Segment{ID: c.part(0), Tokens: n})
	}
	heap.Push(&ct.pending, c)
	ct.open += ct.gap()
}

// turn is c's next turn as an arrival; c returns to the heap for the one
// after, if any.
func (ct *ConversationTrace) turn(c *conversation) Arrival {
	s := ct.s
	c.turn++
	q := Segment{ID: c.part(2*c.turn - 1), Tokens: s.Question.Draw(ct.rng)}
	segs := append(append(make([]Segment, 0, len(c.history)+1), c.history...), q)
	a := Arrival{At: c.at, MaxToken: s.MaxTokens, Output: s.Answer.Draw(ct.rng), Content: &Content{Segments: segs}}
	for _, sg := range segs {
		a.Prompt += sg.Tokens
	}
	if c.turn < c.turns {
		c.history = append(c.history, q, Segment{ID: c.part(2 * c.turn), Tokens: a.Output})
		c.at += s.ThinkMin + time.Duration(ct.rng.Int64N(int64(s.ThinkMax-s.ThinkMin)+1))
		heap.Push(&ct.pending, c)
	}
	return a
}

// part is the id of part p of conversation c's text (0: the user's
// context; then questions and answers in turn), apart from every system
// prompt's (1 … SystemPrompts).
func (c *conversation) part(p int) uint64 { return (c.id+1)<<20 | uint64(p) }

// systemTokens is system prompt k's length: fixed per prompt, spread over
// the range.
func systemTokens(r Range, k int) int {
	return r.Min + int(tokenID(uint64(k+1), 0))%(r.Max-r.Min+1)
}

// multiTurn is the multi-turn scenario: DefaultConversations at
// MultiTurnRate, interactive chat users (ChatClient) held to the short
// requests' time-to-first-token deadline.
func multiTurn() Scenario {
	return Scenario{
		Name: "multi-turn",
		Summary: "multi-turn chats: 8 shared system prompts of 800–1 200 tokens, each conversation a user context of " +
			"0–4 000 tokens and 1–9 turns re-sending the history, 10–30 s apart (the production stack's multi-round QA)",
		Mechanism: "long, growing prompts whose prefixes the pod's KV cache holds between turns: the KV cache fills " +
			"with conversations, and a turn sent to a pod without its history prefills it all again",
		Reports: []string{
			"https://docs.vllm.ai/projects/production-stack/en/vllm-stack-0.1.5/benchmarks/multiround-qa.html",
			"https://github.com/kvcache-ai/Mooncake/tree/main/FAST25-release",
		},
		apply: func(s *Settings) {
			if s.Conversations.Rate == 0 {
				s.Conversations = DefaultConversations()
				s.Conversations.Rate = MultiTurnRate
			}
			if s.Clients == nil {
				s.Clients = map[string]Client{"chat": ChatClient()}
			}
			slo := s.SLO.withDefaults()
			s.SLO.TTFT = map[string]time.Duration{"chat": slo.ttft("short")}
			for k, v := range slo.TTFT {
				if k != "chat" {
					s.SLO.TTFT[k] = v
				}
			}
		},
	}
}

// MultiTurnRate is the multi-turn scenario's conversations per second.
const MultiTurnRate = 4.0
