package replay

import (
	"slices"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// TestConversationTrace: turns come in time order, each re-sends its
// conversation's history (the previous turn's prompt and answer lead its
// own), system prompts are shared, and the same seed gives the same turns.
func TestConversationTrace(t *testing.T) {
	t.Parallel()
	s := DefaultConversations()
	read := func() []Arrival {
		ct, err := NewConversationTrace(s, 10*time.Minute, 7)
		if err != nil {
			t.Fatal(err)
		}
		var out []Arrival
		for a, ok := ct.Next(); ok; a, ok = ct.Next() {
			out = append(out, a)
		}
		return out
	}
	arr := read()
	again := read()
	if len(arr) != len(again) || len(arr) < 1000 {
		t.Fatalf("%d and %d turns, want the same, ≥ 1000", len(arr), len(again))
	}
	systems := map[uint64]int{}
	followed := 0
	for i, a := range arr {
		if i > 0 && a.At < arr[i-1].At || a.At >= 10*time.Minute {
			t.Fatalf("turn %d at %v after %v", i, a.At, arr[i-1].At)
		}
		if a != again[i] && (a.At != again[i].At || !slices.Equal(a.Content.Segments, again[i].Content.Segments)) {
			t.Fatalf("turn %d differs between two reads", i)
		}
		segs := a.Content.Segments
		n := 0
		for _, sg := range segs {
			n += sg.Tokens
		}
		if n != a.Prompt || a.Output < s.Answer.Min || a.Output > s.Answer.Max {
			t.Fatalf("turn %d: segments of %d tokens, prompt %d, output %d", i, n, a.Prompt, a.Output)
		}
		systems[segs[0].ID]++
		// The conversation's next turn, if any, leads with this prompt and its answer.
		for _, b := range arr[i+1:] {
			bs := b.Content.Segments
			if len(bs) > 1 && len(segs) > 1 && bs[1] == segs[1] && len(bs) == len(segs)+2 {
				if !slices.Equal(bs[:len(segs)], segs) || bs[len(segs)].Tokens != a.Output {
					t.Fatalf("turn %d's next turn does not re-send its history", i)
				}
				if d := b.At - a.At; d < s.ThinkMin || d > s.ThinkMax {
					t.Fatalf("think time %v", d)
				}
				followed++
				break
			}
		}
	}
	if len(systems) != s.SystemPrompts || followed < len(arr)/2 {
		t.Fatalf("%d system prompts, %d of %d turns followed by another", len(systems), followed, len(arr))
	}
}

// TestPromptBlocks: two prompts that share their first segments share the
// engine's KV blocks and the router's blocks of that text, and none after.
func TestPromptBlocks(t *testing.T) {
	t.Parallel()
	sys := Segment{ID: 1, Tokens: 1000}
	a := []Segment{sys, {ID: 1 << 20, Tokens: 300}}
	b := []Segment{sys, {ID: 2 << 20, Tokens: 300}}
	ka, kb := kvBlockHashes(a, 16), kvBlockHashes(b, 16)
	if len(ka) != 1300/16 || len(kb) != len(ka) {
		t.Fatalf("%d and %d KV blocks, want %d", len(ka), len(kb), 1300/16)
	}
	shared := 0
	for shared < len(ka) && ka[shared] == kb[shared] {
		shared++
	}
	if shared != 1000/16 {
		t.Fatalf("%d KV blocks shared, want %d (the system prompt's whole blocks)", shared, 1000/16)
	}
	ra, rb := route.Blocks(nil, "m", promptText(a)), route.Blocks(nil, "m", promptText(b))
	rs := 0
	for rs < len(ra) && rs < len(rb) && ra[rs] == rb[rs] {
		rs++
	}
	// About 4 characters a token: the system prompt's ≈ 4 000 characters,
	// ≈ 62 blocks of 64, within a few blocks of the engine's count.
	if rs < shared-4 || rs > shared+4 || len(ra) != route.MaxBlocks && len(ra) < rs+1 {
		t.Fatalf("router shares %d of %d blocks, engine %d", rs, len(ra), shared)
	}
}
