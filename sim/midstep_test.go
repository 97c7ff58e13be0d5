package sim

import (
	"testing"
	"time"
)

// TestMidStepReadings: with MidStepReadings, a reading taken while a step
// runs sees the step's buffers live (more allocated, less free); between
// steps, or without the setting, it sees the allocator at rest. The engine's
// own course is the same either way.
func TestMidStepReadings(t *testing.T) {
	run := func(mid bool) (during, after MemoryBlocks, m Metrics) {
		e := newEngine(t, Settings{MidStepReadings: mid})
		for range 64 {
			if _, err := e.Submit(Request{PromptTokens: 500, MaxTokens: 64, TopP: true}); err != nil {
				t.Fatal(err)
			}
		}
		e.Advance(time.Millisecond) // the first step starts at 0 and ends past 1 ms
		if e.Now() <= time.Millisecond {
			t.Fatalf("Now() = %v after Advance(1ms), want a step still running at 1 ms", e.Now())
		}
		during = e.MemoryBlocks("0")
		e.Advance(e.Now()) // at the step's end: nothing runs
		after = e.MemoryBlocks("0")
		e.Advance(time.Minute)
		return during, after, e.Metrics()
	}
	during, after, m := run(true)
	if during.AllocatedBytes <= after.AllocatedBytes || during.FreeBytes >= after.FreeBytes {
		t.Errorf("mid-step: allocated %d, free %d; at rest: %d, %d; want the step's buffers live mid-step",
			during.AllocatedBytes, during.FreeBytes, after.AllocatedBytes, after.FreeBytes)
	}
	off, offAfter, offM := run(false)
	if off != offAfter {
		t.Errorf("without MidStepReadings: %+v during a step, %+v after it; want the allocator at rest both times", off, offAfter)
	}
	if offM != m {
		t.Errorf("the engine's course differs with MidStepReadings:\n%+v\n%+v", offM, m)
	}
}
