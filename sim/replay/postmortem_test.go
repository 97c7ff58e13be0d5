package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Every OOM comes with its timeline: the failed step and the rounds before
// it, oldest first, the last one within a round of the OOM; what gatekeeper
// released is counted per class.
func TestOOMTimelines(t *testing.T) {
	t.Parallel()
	for _, p := range []Policy{None, Gatekeeper} {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			s := ooming(p, 5*time.Minute, 3)
			s.TTFTDeadline, s.NoFailureCeiling = -1, true
			r, err := Run(s)
			if err != nil {
				t.Fatal(err)
			}
			if r.OOMs == 0 || int64(len(r.OOMTimelines)) != r.OOMs {
				t.Fatalf("%d OOMs, %d timelines: want one each, and some", r.OOMs, len(r.OOMTimelines))
			}
			for i, tl := range r.OOMTimelines {
				rs := tl.Rounds
				if tl.OOM.Err == nil || tl.OOM.Samples == 0 || len(rs) == 0 || len(rs) > postmortemRounds {
					t.Fatalf("timeline %d: step %+v, %d rounds", i, tl.OOM, len(rs))
				}
				last := rs[len(rs)-1]
				if gap := tl.OOM.At - last.At; gap < 0 || gap > 500*time.Millisecond || !last.Alive {
					t.Errorf("timeline %d: last round at %v alive %v, OOM at %v", i, last.At, last.Alive, tl.OOM.At)
				}
				started := 0
				for j, rec := range rs {
					if j > 0 && rec.At <= rs[j-1].At {
						t.Fatalf("timeline %d: rounds out of order at %d", i, j)
					}
					for _, n := range rec.Started {
						started += n
					}
				}
				if started == 0 || (p == Gatekeeper) != (last.Window > 0) {
					t.Errorf("timeline %d: %d started, window %d", i, started, last.Window)
				}
			}
			var b bytes.Buffer
			if err := WriteTimelines(&b, []string{"short", "long"}, r.OOMTimelines); err != nil ||
				!strings.Contains(b.String(), "OOM 1 at ") || !strings.Contains(b.String(), "stranded in split segments") {
				t.Fatalf("WriteTimelines = %v:\n%s", err, b.String())
			}
		})
	}
}
