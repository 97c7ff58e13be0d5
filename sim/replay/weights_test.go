package replay

import (
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// The gatekeeper routing runs the policy's routing.scorers: the file's
// defaults unless the policy writes its own.
func TestRoutingWeightsFollowThePolicy(t *testing.T) {
	t.Parallel()
	d := config.Default().Routing.Scorers
	if want := (route.Weights{Prefix: d.Prefix, Load: d.Load, KV: d.KVCache, Memory: d.Memory}); GatekeeperWeights != want {
		t.Fatalf("GatekeeperWeights = %+v, want the policy's defaults %+v", GatekeeperWeights, want)
	}
	c := config.Default()
	c.Routing.Scorers = config.Scorers{Prefix: 1, Load: 4}
	s := WithPolicy(c, Settings{})
	if s.Weights == nil || *s.Weights != (route.Weights{Prefix: 1, Load: 4}) {
		t.Fatalf("WithPolicy's Weights = %v, want the file's prefix 1, load 4", s.Weights)
	}
}
