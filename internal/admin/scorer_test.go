package admin

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// TestScorerState: each upstream's pod scorer inputs, an unknown value
// left out (JSON has no NaN); none before the first round.
func TestScorerState(t *testing.T) {
	t.Parallel()
	src := fakeSources()
	src.Scorer = func(name string) (route.Pod, bool) {
		return route.Pod{Waiting: 2, KVUsage: 0.5, Memory: math.NaN()}, name == "a"
	}
	s := Snapshot(src)
	b, err := json.Marshal(s.Upstreams)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"scorer":{"waiting":2,"kv_cache_usage":0.5}`) {
		t.Errorf("upstreams = %s, want a's scorer inputs without memory_headroom", b)
	}
	if s.Upstreams[1].Scorer != nil {
		t.Errorf("b's scorer = %+v, want none before a round", s.Upstreams[1].Scorer)
	}
}
