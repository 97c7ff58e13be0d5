package control

import (
	"fmt"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// TestChanges drives upstream a from normal to critical and back, again and
// again, with one change of b between, and checks that Changes lists the
// latest ChangeHistory level changes, newest first, each with its upstream
// and cause; the status page shows them on a fresh load (issue 35, item 13).
func TestChanges(t *testing.T) {
	t.Parallel()
	c, err := New(FromPolicy(policy(t)))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Changes(); got == nil || len(got) != 0 {
		t.Fatalf("Changes() before any change = %#v, want empty, not nil (JSON [])", got)
	}
	type sigs = map[string]map[pressure.Signal]pressure.Value
	frag := func(v float64) map[pressure.Signal]pressure.Value {
		return map[pressure.Signal]pressure.Value{pressure.Fragmentation: val(v, "a/memory_blocks", false)}
	}
	now := t0
	var want []string // every change, oldest first
	for i := range 30 {
		if i == 3 {
			c.ObserveAt(now, round(sigs{"b": {pressure.KVCacheUsage: val(0.97, "b/vllm", false)}}), true)
			want = append(want, fmt.Sprintf("b normal→degraded kv_cache_usage 0.97 at %s", now.Format(time.TimeOnly)))
		}
		c.ObserveAt(now, round(sigs{"a": frag(1.6)}), true)
		want = append(want, fmt.Sprintf("a normal→critical fragmentation 1.6 at %s", now.Format(time.TimeOnly)))
		now = now.Add(time.Second)
		c.ObserveAt(now, round(sigs{"a": frag(1.0)}), true) // calm: the hold of 5s starts
		now = now.Add(6 * time.Second)
		c.ObserveAt(now, round(sigs{"a": frag(1.0)}), true)
		want = append(want, fmt.Sprintf("a critical→normal fragmentation 1 at %s", now.Format(time.TimeOnly)))
		now = now.Add(time.Second)
	}
	got := c.Changes()
	if len(got) != changeHistory {
		t.Fatalf("Changes() holds %d, want the latest %d of %d", len(got), changeHistory, len(want))
	}
	for i, ch := range got {
		s := fmt.Sprintf("%s %s→%s %s %g at %s", ch.Upstream, ch.From, ch.To, ch.Signal, ch.Value, ch.At.Format(time.TimeOnly))
		if w := want[len(want)-1-i]; s != w {
			t.Errorf("Changes()[%d] = %s, want %s", i, s, w)
		}
	}
	got[0].Upstream = "changed by the caller"
	if c.Changes()[0].Upstream != "a" {
		t.Errorf("Changes() shares its slice with the Controller")
	}
}
