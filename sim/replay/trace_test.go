package replay

import (
	"fmt"
	"hash/fnv"
	"testing"
	"time"
)

// TestTracePinned pins the synthetic trace of seed 1: its arrivals were
// recorded before the trace moved onto sim/traffic's arrivals and mix, and
// any change to the draws (their order, their count) changes every figure
// of the replay's table. Change the pin only with a change that means to.
func TestTracePinned(t *testing.T) {
	tr, err := NewTrace(TraceSettings{Duration: time.Hour, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	first := []Arrival{
		{At: 17360077, Class: 0, Prompt: 81, Output: 112, MaxToken: 256, TopP: true},
		{At: 36212854, Class: 0, Prompt: 184, Output: 39, MaxToken: 256, TopP: false},
		{At: 37168079, Class: 0, Prompt: 213, Output: 146, MaxToken: 256, TopP: true},
		{At: 77309426, Class: 0, Prompt: 104, Output: 114, MaxToken: 256, TopP: false},
	}
	const wantN, wantHash = 197842, 0xe36ffbd1c27d2f3a
	h := fnv.New64a()
	n := 0
	for a, ok := tr.Next(); ok; a, ok = tr.Next() {
		if n < len(first) && a != first[n] {
			t.Errorf("arrival %d = %+v, want %+v", n, a, first[n])
		}
		n++
		fmt.Fprintf(h, "%d %d %d %d %d %v|", a.At, a.Class, a.Prompt, a.Output, a.MaxToken, a.TopP)
	}
	if n != wantN || h.Sum64() != wantHash {
		t.Errorf("seed 1, 1h: %d arrivals, hash %#x; want %d, %#x", n, h.Sum64(), wantN, uint64(wantHash))
	}
}

// TestTracePromptLogprobs: the share of prompt_logprobs requests follows
// the setting; out-of-range shares are refused.
func TestTracePromptLogprobs(t *testing.T) {
	t.Parallel()
	tr, err := NewTrace(TraceSettings{Duration: 10 * time.Minute, Seed: 1, PromptLogprobsFraction: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	n, with := 0, 0
	for a, ok := tr.Next(); ok; a, ok = tr.Next() {
		n++
		if a.PromptLogprobs {
			with++
		}
	}
	if f := float64(with) / float64(n); f < 0.18 || f > 0.22 {
		t.Errorf("%d of %d arrivals ask for prompt_logprobs (%.3f), want about 0.2", with, n, f)
	}
	if _, err := NewTrace(TraceSettings{PromptLogprobsFraction: 1.5}); err == nil {
		t.Error("PromptLogprobsFraction 1.5 accepted")
	}
}
